//go:build fault

package fault

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/example/payment-service/internal/faultproxy"
	"github.com/example/payment-service/pkg/paymentclient"
)

// The reference client against the real service, through links that lose
// answers on and off (client <-> service and service <-> provider): every
// operation ends with its payment and exactly one charge at the provider.
func TestReferenceClientThroughLossyLinks(t *testing.T) {
	s := newStack(t, stackOptions{replicas: 1})
	c := newChecker(s)
	r := s.replicas[0]
	client := newPaymentClient(t, r, paymentclient.RetryPolicy{InitialBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})

	// Both links flap: answers are lost for 40 ms out of every 100.
	stop := make(chan struct{})
	flapped := make(chan struct{})
	go func() {
		defer close(flapped)
		for {
			for _, m := range []faultproxy.Mode{faultproxy.LoseResponses, faultproxy.Pass} {
				_ = r.front.SetMode(m)
				_ = s.toProvider.SetMode(m)
				select {
				case <-stop:
					return
				case <-time.After(map[faultproxy.Mode]time.Duration{faultproxy.LoseResponses: 40 * time.Millisecond, faultproxy.Pass: 60 * time.Millisecond}[m]):
				}
			}
		}
	}()

	const n = 40
	var ops []op
	for i := range n {
		o := op{key: paymentclient.NewIdempotencyKey(), order: int64(6000 + i), customer: 21, amount: fmt.Sprintf("%d.99", 60+i), ext: fmt.Sprintf("pi_client_%d", i)}
		if i%8 == 7 {
			o.ext = fmt.Sprintf("decline_client_%d", i)
		}
		s.addOrder(o)
		ops = append(ops, o)
	}
	var attempts atomic.Int64
	var wg sync.WaitGroup
	for _, o := range ops {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := client.Charge(ctx, o.key, chargeRequest(o))
			var declined *paymentclient.DeclinedError
			switch {
			case errors.As(err, &declined):
				attempts.Add(1)
				if o.ext[:8] != "decline_" || declined.Payment.Status != "DECLINED" {
					t.Errorf("op %s: %v", o.key, err)
				}
			case err != nil:
				t.Errorf("op %s: %v", o.key, err)
			default:
				attempts.Add(int64(res.Attempts))
				if res.Payment.ExternalPaymentID != o.ext || res.Payment.Status != "SUCCEEDED" {
					t.Errorf("op %s: %+v", o.key, res)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-flapped
	s.heal()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d operations, %d attempts through the flapping links", n, attempts.Load())
	if attempts.Load() <= n {
		t.Fatal("no operation needed a retry: the links lost nothing")
	}
	require(t, c.check(ops, nil), "after the reference client")
	require(t, c.checkGlobal(), "after the reference client")
}

// The careless patterns, for contrast: the first attempt's answer is lost
// (the charge went through), and the client retries with a new key. Each
// layer of the service then does its part, and the money moves once, but
// the careless client never learns its own outcome the way the careful one
// does (201, replayed):
//
//   - a new key, the same external payment: the second layer (one row per
//     external payment) answers 200 with the payment already recorded;
//   - a new key and a new external payment (a new provider payment intent
//     per attempt): the third layer (one paid order is paid once) answers
//     409 order-already-paid, and the second intent is never charged;
//   - the same, while the first attempt's outcome is still unknown (its
//     provider answer was lost too): 409 request-in-progress, again and
//     again, until the completer has finished the first attempt; then
//     order-already-paid.
func TestCarelessClientsForContrast(t *testing.T) {
	s := newStack(t, stackOptions{replicas: 1})
	c := newChecker(s)
	r := s.replicas[0]
	once := newPaymentClient(t, r, paymentclient.RetryPolicy{MaxAttempts: 1})
	careful := newPaymentClient(t, r, paymentclient.RetryPolicy{InitialBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	ctx := t.Context()

	lostFirst := func(o op) {
		t.Helper()
		must(t, r.front.SetMode(faultproxy.LoseResponses))
		_, err := once.Charge(ctx, o.key, chargeRequest(o))
		must(t, r.front.SetMode(faultproxy.Pass))
		var g *paymentclient.GaveUpError
		if !errors.As(err, &g) || !errors.Is(err, paymentclient.ErrOutcomeUnknown) {
			t.Fatalf("first attempt through a link that loses answers: %v, want an unknown outcome", err)
		}
	}

	t.Run("careful: the same key again", func(t *testing.T) {
		o := op{key: paymentclient.NewIdempotencyKey(), order: 7001, customer: 31, amount: "70.01", ext: "pi_careful"}
		s.addOrder(o)
		lostFirst(o)
		res, err := careful.Charge(ctx, o.key, chargeRequest(o))
		if err != nil || !res.Created || !res.Replayed {
			t.Fatalf("retry with the same key: %+v %v, want the stored 201, replayed", res, err)
		}
		require(t, c.check([]op{o}, nil), "careful")
	})

	t.Run("careless: a new key, the same external payment", func(t *testing.T) {
		o := op{key: paymentclient.NewIdempotencyKey(), order: 7002, customer: 31, amount: "70.02", ext: "pi_careless_key"}
		s.addOrder(o)
		lostFirst(o)
		retry := o
		retry.key = paymentclient.NewIdempotencyKey()
		res, err := careful.Charge(ctx, retry.key, chargeRequest(retry))
		if err != nil || res.Created || res.Payment.ExternalPaymentID != o.ext {
			t.Fatalf("a new key for the same external payment: %+v %v, want 200 with the payment already recorded", res, err)
		}
		require(t, c.check([]op{o, retry}, nil), "careless key")
		if n := s.count(`SELECT count(*) FROM idempotency_record WHERE http_status = 200 AND idempotency_key = $1`, retry.key); n != 1 {
			t.Fatal("the second key's stored answer is not the 200 of the second layer")
		}
	})

	t.Run("careless: a new key and a new external payment", func(t *testing.T) {
		o := op{key: paymentclient.NewIdempotencyKey(), order: 7003, customer: 31, amount: "70.03", ext: "pi_careless_intent_1"}
		s.addOrder(o)
		lostFirst(o)
		retry := o
		retry.key, retry.ext = paymentclient.NewIdempotencyKey(), "pi_careless_intent_2"
		_, err := careful.Charge(ctx, retry.key, chargeRequest(retry))
		if !errors.Is(err, paymentclient.ErrOrderAlreadyPaid) {
			t.Fatalf("a new key and a new external payment for a paid order: %v, want order-already-paid", err)
		}
		if _, charged := s.provider.Lookup(retry.providerKey()); charged {
			t.Fatal("the second payment intent was charged")
		}
		require(t, c.check([]op{o, retry}, nil), "careless intent")
	})

	t.Run("careless: a new intent while the first outcome is unknown", func(t *testing.T) {
		o := op{key: paymentclient.NewIdempotencyKey(), order: 7004, customer: 31, amount: "70.04", ext: "pi_careless_unknown_1"}
		s.addOrder(o)
		// The provider charges, and its answer is lost on the way back.
		must(t, s.toProvider.SetMode(faultproxy.LoseResponses))
		_, err := once.Charge(ctx, o.key, chargeRequest(o))
		must(t, s.toProvider.SetMode(faultproxy.Pass))
		if !errors.Is(err, paymentclient.ErrOutcomeUnknown) {
			t.Fatalf("first attempt: %v, want outcome-unknown", err)
		}
		var answers []answer
		inProgress := 0
		for i := 0; ; i++ {
			retry := o
			retry.key, retry.ext = fmt.Sprintf("careless-%d", i), fmt.Sprintf("pi_careless_unknown_%d", i+2)
			a := r.charge(retry, 5*time.Second)
			answers = append(answers, a)
			if a.status == http.StatusConflict && a.code == "request-in-progress" {
				inProgress++
				if i > 200 {
					t.Fatal("still in progress after 200 careless attempts")
				}
				time.Sleep(100 * time.Millisecond)
				continue
			}
			if a.status != http.StatusConflict || a.code != "order-already-paid" {
				t.Fatalf("careless attempt %d: %s, want in-progress and then order-already-paid", i, a)
			}
			ops := []op{o}
			for j := 0; j <= i; j++ {
				x := o
				x.key, x.ext = fmt.Sprintf("careless-%d", j), fmt.Sprintf("pi_careless_unknown_%d", j+2)
				ops = append(ops, x)
			}
			require(t, c.check(ops, answers), "careless while unknown")
			break
		}
		if inProgress == 0 {
			t.Fatal("no careless attempt met the first one in flight")
		}
		t.Logf("%d careless attempts met request-in-progress before the completer finished the first one", inProgress)
	})
	require(t, c.checkGlobal(), "after the careless clients")
	if got := s.provider.Counters().Charges; got != 4 {
		t.Fatalf("the provider made %d charges for 4 orders", got)
	}
}

func newPaymentClient(t *testing.T, r *replica, policy paymentclient.RetryPolicy) *paymentclient.Client {
	t.Helper()
	c, err := paymentclient.New(paymentclient.Config{BaseURL: r.url, APIKey: apiKey, AttemptTimeout: 3 * time.Second, Retry: policy})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func chargeRequest(o op) paymentclient.ChargeRequest {
	return paymentclient.ChargeRequest{OrderID: o.order, CustomerID: o.customer, Amount: o.amount, Currency: "RUB",
		PaymentProvider: "sandbox", ExternalPaymentID: o.ext}
}
