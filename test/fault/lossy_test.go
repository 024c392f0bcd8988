//go:build fault

package fault

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/example/payment-service/internal/faultproxy"
)

// Answers lost on either link. Each operation's first answer is lost; the
// careful client's retries with the same key end with one charge each.
//
//   - client <-> service: the request is processed, the answer never comes
//     back (the front proxies drop every answer);
//   - service <-> provider: the provider charges, its answer is lost on the
//     way (the provider link drops every answer), and the service must say
//     so: 503 outcome-unknown, never "nothing was charged";
//   - the provider itself loses its answer (drop_, gw502_, slow_, busy_);
//   - the provider link refuses connections: 503 provider-unavailable, and
//     then truly nothing was charged.
func TestLostAnswers(t *testing.T) {
	s := newStack(t, stackOptions{replicas: 3})
	c := newChecker(s)

	cases := []struct {
		name string
		refs []string
		// fault is applied before the first attempts and undone after.
		fault func()
		// first checks the first answer of each op.
		first func(t *testing.T, a answer)
		// charged: whether the first attempt charged at the provider.
		charged bool
	}{
		{
			name:    "client <-> service",
			refs:    []string{"pi_lc"},
			fault:   func() { s.forEachFront(faultproxy.LoseResponses) },
			first:   func(t *testing.T, a answer) { wantNoAnswer(t, a) },
			charged: true,
		},
		{
			name:    "service <-> provider",
			refs:    []string{"pi_lp"},
			fault:   func() { must(t, s.toProvider.SetMode(faultproxy.LoseResponses)) },
			first:   func(t *testing.T, a answer) { wantCode(t, a, http.StatusServiceUnavailable, "outcome-unknown") },
			charged: true,
		},
		{
			name:    "the provider loses its own answer",
			refs:    []string{"drop_lq", "gw502_lq", "slow_lq", "busy_lq"},
			fault:   func() {},
			first:   func(t *testing.T, a answer) { wantCode(t, a, http.StatusServiceUnavailable, "outcome-unknown") },
			charged: true, // busy_ excepted, below
		},
		{
			name: "both links at once",
			refs: []string{"pi_lb", "drop_lb"},
			fault: func() {
				s.forEachFront(faultproxy.LoseResponses)
				must(t, s.toProvider.SetMode(faultproxy.LoseResponses))
			},
			first:   func(t *testing.T, a answer) { wantNoAnswer(t, a) },
			charged: true,
		},
		{
			name:    "the provider link refuses",
			refs:    []string{"pi_lr"},
			fault:   func() { must(t, s.toProvider.SetMode(faultproxy.Refuse)) },
			first:   func(t *testing.T, a answer) { wantCode(t, a, http.StatusServiceUnavailable, "provider-unavailable") },
			charged: false,
		},
	}
	for ci, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ops []op
			for i := range 8 {
				ref := tc.refs[i%len(tc.refs)]
				o := op{key: fmt.Sprintf("lost-%d-%d", ci, i), order: int64(3000 + 100*ci + i), customer: 11,
					amount: fmt.Sprintf("%d.25", 30+i), ext: fmt.Sprintf("%s_%d_%d", ref, ci, i)}
				s.addOrder(o)
				ops = append(ops, o)
			}
			answers := loseFirstAnswers(s, t, tc.fault, ops, func(i int) (bool, bool) {
				return len(s.provider.ChargesFor(ops[i].ext)) > 0, tc.charged && !strings.HasPrefix(ops[i].ext, "busy_")
			}, tc.first)
			for _, o := range ops {
				answers = append(answers, s.settle(o, 20*time.Second)...)
			}
			require(t, c.check(ops, answers), tc.name)
			require(t, c.checkGlobal(), tc.name)
			for _, o := range ops {
				if chs := s.provider.ChargesFor(o.ext); len(chs) != 1 || chs[0].Status != "succeeded" {
					t.Errorf("op %s: the provider has %+v, want one succeeded charge", o.key, chs)
				}
			}
		})
	}

	// The same faults on refunds, of payments charged with no fault: the
	// refund's own references pick the provider's behaviour. Half of the
	// refunds are settled by the careful client; the other half are never
	// retried, and the completer must finish those whose first attempt
	// left them PENDING.
	for ci, tc := range cases {
		t.Run("refund: "+tc.name, func(t *testing.T) {
			charges := toRefund(fmt.Sprintf("lost-refund-%d", ci), 8, int64(3500+100*ci), 11)
			var refunds []refundOp
			for i, p := range s.pay(charges) {
				refunds = append(refunds, refundOp{key: fmt.Sprintf("lost-refund-%d-%d", ci, i), amount: fmt.Sprintf("%d.10", 10+i),
					ext: fmt.Sprintf("%s_refund_%d_%d", tc.refs[i%len(tc.refs)], ci, i), paid: p})
			}
			answers := loseFirstAnswers(s, t, tc.fault, refunds, func(i int) (bool, bool) {
				_, refunded := s.provider.LookupRefund(refunds[i].providerKey())
				return refunded, tc.charged && !strings.HasPrefix(refunds[i].ext, "busy_")
			}, tc.first)
			for i, o := range refunds {
				if i%2 == 0 || !tc.charged {
					answers = append(answers, s.settle(o, 20*time.Second)...)
				}
			}
			waitFor(t, 30*time.Second, "the completer finishing the refunds nobody retried", func() bool {
				return s.count(`SELECT count(*) FROM refund WHERE status = 'PENDING'`) == 0 &&
					s.count(`SELECT count(*) FROM idempotency_record WHERE status = 'IN_PROGRESS'`) == 0
			})
			require(t, c.check(charges, nil), tc.name)
			require(t, c.checkRefunds(refunds, answers), tc.name)
			require(t, c.checkGlobal(), tc.name)
			for _, o := range refunds {
				if r, ok := s.provider.LookupRefund(o.providerKey()); !ok || r.Status != "succeeded" {
					t.Errorf("refund %s: the provider has %v %+v, want a succeeded refund", o.key, ok, r)
				}
			}
		})
	}
}

// loseFirstAnswers sends each operation once, all at once over the
// replicas, with fault armed, heals, and checks each first answer (first)
// and whether it moved the money at the provider (moved: what happened and
// what should have). It returns the first answers.
func loseFirstAnswers[O operation](s *stack, t *testing.T, fault func(), items []O, moved func(i int) (got, want bool), first func(*testing.T, answer)) []answer {
	fault()
	firsts := make([]answer, len(items))
	var wg sync.WaitGroup
	for i, o := range items {
		wg.Go(func() { firsts[i] = s.replicas[i%3].send(o.call(), 5*time.Second) })
	}
	wg.Wait()
	s.heal()
	for i, a := range firsts {
		first(t, a)
		if got, want := moved(i); got != want {
			t.Errorf("%s after its first attempt: moved at the provider = %v, want %v", a.key, got, want)
		}
	}
	return firsts
}

func (s *stack) forEachFront(m faultproxy.Mode) {
	for _, r := range s.replicas {
		must(s.t, r.front.SetMode(m))
	}
}

func wantNoAnswer(t *testing.T, a answer) {
	t.Helper()
	if a.err == nil {
		t.Errorf("%s: an answer came through a link that loses them", a)
	}
}

func wantCode(t *testing.T, a answer, status int, code string) {
	t.Helper()
	if a.err != nil || a.status != status || a.code != code || a.retryAfter == "" {
		t.Errorf("%s: want %d %s with Retry-After", a, status, code)
	}
}
