//go:build fault

package fault

import (
	"fmt"
	"net/http"
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
			tc.fault()
			firsts := make([]answer, len(ops))
			var wg sync.WaitGroup
			for i, o := range ops {
				wg.Go(func() { firsts[i] = s.replicas[i%3].charge(o, 5*time.Second) })
			}
			wg.Wait()
			s.heal()
			for i, a := range firsts {
				tc.first(t, a)
				charged := len(s.provider.ChargesFor(ops[i].ext)) > 0
				want := tc.charged && ops[i].ext[:5] != "busy_"
				if charged != want {
					t.Errorf("op %s after its first attempt: charged at the provider = %v, want %v", ops[i].key, charged, want)
				}
			}
			answers := append([]answer{}, firsts...)
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
