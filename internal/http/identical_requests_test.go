package http_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/testdb"
)

// Identical requests at once: the same key, the same command, sent 20 times
// together on a fresh resource. The contract allows each of them only the
// key's stored answer or 409 request-in-progress: never a refusal the
// request that made the movement did not get (a capture told "not
// authorized" because a duplicate read the payment after the capture was
// recorded). The provider's ledger shows one movement.
func TestIdenticalRequestsAtOnceGetTheStoredAnswerOrInProgress(t *testing.T) {
	t.Parallel()
	const rounds, copies = 4, 20

	// Each command: prepare makes the fresh resource of a round and returns
	// the request to send; moved counts the movements the provider holds
	// for the round.
	type command struct {
		name    string
		prepare func(t *testing.T, s *testService, round int) (path, body string)
		moved   func(t *testing.T, s *testService, round int) int
	}
	external := func(name string, round int) string { return fmt.Sprintf("pi_same_%s_%d", name, round) }
	order := func(base int64, round int) int64 { return base + int64(round) }
	// refundsOf charges a fresh order and returns its refunds' path.
	refundsOf := func(t *testing.T, s *testService, name string, base int64, round int) string {
		s.addOrder(t, order(base, round), 42, "20.00", "RUB")
		r := s.charge(t, "pre-"+external(name, round), chargeBody(order(base, round), 42, "20.00", "RUB", external(name, round)))
		if r.status != http.StatusCreated {
			t.Fatalf("charge before %s: %d %s", name, r.status, r.body)
		}
		return fmt.Sprintf("/payments/%d/refunds", paymentOf(t, r).ID)
	}
	commands := []command{
		{
			name: "charge",
			prepare: func(t *testing.T, s *testService, round int) (string, string) {
				s.addOrder(t, order(9500, round), 42, "20.00", "RUB")
				return "/payments", chargeBody(order(9500, round), 42, "20.00", "RUB", external("charge", round))
			},
			moved: func(t *testing.T, s *testService, round int) int {
				return len(s.ledger(t).Succeeded(external("charge", round)))
			},
		},
		{
			name: "authorize",
			prepare: func(t *testing.T, s *testService, round int) (string, string) {
				s.addOrder(t, order(9520, round), 42, "20.00", "RUB")
				return "/payments", authorizeBody(order(9520, round), "20.00", external("authorize", round))
			},
			moved: func(t *testing.T, s *testService, round int) int {
				return s.provider.NetCaptured(external("authorize", round)).Authorizations
			},
		},
		{
			name: "capture",
			prepare: func(t *testing.T, s *testService, round int) (string, string) {
				id := s.authorize(t, order(9540, round), "20.00", external("capture", round))
				return fmt.Sprintf("/payments/%d/captures", id), captureBody("20.00", "RUB", fmt.Sprintf("c%d", round))
			},
			moved: func(t *testing.T, s *testService, round int) int {
				return s.provider.NetCaptured(external("capture", round)).Captures
			},
		},
		{
			name: "void",
			prepare: func(t *testing.T, s *testService, round int) (string, string) {
				id := s.authorize(t, order(9560, round), "20.00", external("void", round))
				return fmt.Sprintf("/payments/%d/voids", id), "{}"
			},
			moved: func(t *testing.T, s *testService, round int) int {
				return s.provider.NetCaptured(external("void", round)).Voids
			},
		},
		{
			// The refund of the whole payment: once it is made, nothing is
			// left, and a duplicate that read the payment after it must not
			// be told "exceeds what the payment has left".
			name: "refund",
			prepare: func(t *testing.T, s *testService, round int) (string, string) {
				return refundsOf(t, s, "refund", 9580, round), refundBody("20.00", fmt.Sprintf("re_all_%d", round))
			},
			moved: func(t *testing.T, s *testService, round int) int {
				return len(s.ledger(t).SucceededRefunds(fmt.Sprintf("re_all_%d", round)))
			},
		},
		{
			// What is left after an earlier refund.
			name: "refund of what is left",
			prepare: func(t *testing.T, s *testService, round int) (string, string) {
				path := refundsOf(t, s, "rest", 9600, round)
				if r := s.request(t, http.MethodPost, path, refundBody("5.00", fmt.Sprintf("re_part_%d", round)),
					map[string]string{"Idempotency-Key": fmt.Sprintf("part-%d", round)}); r.status != http.StatusCreated {
					t.Fatalf("refund before: %d %s", r.status, r.body)
				}
				return path, refundBody("15.00", fmt.Sprintf("re_rest_%d", round))
			},
			moved: func(t *testing.T, s *testService, round int) int {
				return len(s.ledger(t).SucceededRefunds(fmt.Sprintf("re_rest_%d", round)))
			},
		},
	}

	for _, latency := range []time.Duration{0, 20 * time.Millisecond} {
		t.Run(fmt.Sprintf("provider latency %s", latency), func(t *testing.T) {
			t.Parallel()
			s := startServiceWith(t, testdb.New(t), nil, sandboxprovider.Config{Latency: latency})
			for _, c := range commands {
				t.Run(c.name, func(t *testing.T) {
					for round := range rounds {
						path, body := c.prepare(t, s, round)
						key := fmt.Sprintf("same-%s-%d", c.name, round)
						answers := make([]response, copies)
						var wg sync.WaitGroup
						for i := range answers {
							wg.Go(func() {
								answers[i] = s.request(t, http.MethodPost, path, body, map[string]string{"Idempotency-Key": key})
							})
						}
						wg.Wait()
						stored := s.storedAnswer(t, key)
						var other []response
						for _, a := range answers {
							inProgress := a.status == http.StatusConflict && codeOf(a) == "request-in-progress"
							if !inProgress && (a.status != stored.status || string(a.body) != string(stored.body)) {
								other = append(other, a)
							}
						}
						if len(other) > 0 {
							t.Errorf("round %d: %d of %d copies answered otherwise, the first %d %s; the key holds %d %s",
								round, len(other), copies, other[0].status, other[0].body, stored.status, stored.body)
						}
						if n := c.moved(t, s, round); n != 1 {
							t.Errorf("round %d: the provider made %d movements, want 1", round, n)
						}
					}
				})
			}
		})
	}
}

// storedAnswer is the answer a key holds once its command has ended: it
// waits (bounded) for an in-progress record to complete.
func (s *testService) storedAnswer(t *testing.T, key string) response {
	t.Helper()
	var stored response
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.db.QueryRow(context.Background(),
			`SELECT coalesce(http_status, 0), coalesce(response::text, '') FROM idempotency_record WHERE idempotency_key = $1`, key).
			Scan(&stored.status, &stored.body)
		switch {
		case err != nil:
			t.Fatalf("the record of key %s: %v", key, err)
		case stored.status != 0:
			return stored
		case time.Now().After(deadline):
			t.Fatalf("the key %s is still in progress", key)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
