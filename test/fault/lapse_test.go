//go:build fault

package fault

// Lapsed holds under faults: the provider's holds last two seconds, and
// the captures and voids of a handful of authorizations come early, just
// before the lapse and after it, while the link to the provider loses its
// answers and a replica is killed -9 around the lapse. The completer's
// runs ask the provider about every hold (ExpireLapsedAuthorizations)
// through the same lossy link. Once healed, each payment is checked
// against the provider's ledger with the two-step invariants (EXPIRED if
// and only if the provider says the hold lapsed, no capture after it, no
// lapse left AUTHORIZED, one PaymentExpired.v1 each), and the order of
// each EXPIRED payment is paid again.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/example/payment-service/internal/faultproxy"
	"github.com/example/payment-service/internal/sandboxprovider"
)

// lapseTTL is how long the provider's holds last in this test: long
// enough for the eleven authorizations and the early commands to land
// before the first lapses on a loaded machine (under -race, beside other
// tests), short enough to keep the test short.
const lapseTTL = 5 * time.Second

// lapseCommand is what one payment meets: when its capture or void is
// sent, relative to its hold's lapse, and through which replica.
type lapseCommand struct {
	kind string // capture, void, or "" for none (the hold just lapses)
	// at is when the first attempt goes out: early (right away), or
	// before or after the hold's lapse by this much.
	early bool
	at    time.Duration
	// sender is the replica of the first attempt; the one killed takes
	// its commands down with it, to the completer and the careful client.
	sender int
}

func TestLapsedHoldsUnderFaults(t *testing.T) {
	s := newStack(t, stackOptions{
		replicas: 2,
		provider: sandboxprovider.Config{AuthorizationTTL: lapseTTL, HoldSweep: 100 * time.Millisecond},
		// The completer (every second) asks about holds authorized for
		// longer than a second.
		env: []string{"AUTHORIZATION_CHECK_AFTER=1s"},
	})
	c := newChecker(s)

	commands := []lapseCommand{
		{kind: "capture", early: true, sender: 0},
		{kind: "capture", early: true, sender: 1},
		{kind: "void", early: true, sender: 0},
		{kind: "capture", at: -250 * time.Millisecond, sender: 0},
		{kind: "capture", at: -150 * time.Millisecond, sender: 1},
		{kind: "void", at: -200 * time.Millisecond, sender: 1},
		{kind: "capture", at: 300 * time.Millisecond, sender: 0},
		{kind: "capture", at: 600 * time.Millisecond, sender: 1},
		{kind: "void", at: 400 * time.Millisecond, sender: 0},
		{}, {},
	}
	plans := make([]*twoStepPlan, len(commands))
	expires := make([]time.Time, len(commands))
	for i, cmd := range commands {
		p := &twoStepPlan{authCents: 10_000, auth: authOp{op{
			key: fmt.Sprintf("lapse-%d-auth", i), order: int64(8_000_000 + i), customer: int64(1 + i),
			amount: "100.00", ext: fmt.Sprintf("pi_lapse_%d", i),
		}}}
		p.payment = s.authorize(p.auth)
		switch cmd.kind {
		case "capture":
			p.captures = []plannedTransition{{transitionOp: transitionOp{kind: "capture", key: fmt.Sprintf("lapse-%d-capture", i),
				amount: "60.00", ref: fmt.Sprintf("cap_lapse_%d", i), paid: p.payment}, senders: []int{cmd.sender}}}
		case "void":
			p.voids = []plannedTransition{{transitionOp: transitionOp{kind: "void", key: fmt.Sprintf("lapse-%d-void", i), paid: p.payment},
				senders: []int{cmd.sender}}}
		}
		a, ok := s.provider.LookupAuthorization(p.auth.providerKey())
		if !ok || a.ExpiresAt.IsZero() {
			t.Fatalf("authorization %s: not at the provider with a lapse time (%v %v)", p.auth.key, ok, a.ExpiresAt)
		}
		plans[i], expires[i] = p, a.ExpiresAt
	}
	lapsesAt := expires[len(expires)-1]

	// The faults: the link to the provider loses its answers from the
	// start (the early commands land, their answers do not come back)
	// until well after the lapse, and replica r1 is killed -9 just before
	// it, with the commands it was sent in flight.
	var mu sync.Mutex
	record := func(p *twoStepPlan, a ...answer) {
		mu.Lock()
		p.answers = append(p.answers, a...)
		mu.Unlock()
	}
	must(t, s.toProvider.SetMode(faultproxy.LoseResponses))
	var wg sync.WaitGroup
	for i, cmd := range commands {
		p := plans[i]
		for _, tr := range append(append([]plannedTransition{}, p.captures...), p.voids...) {
			wg.Go(func() {
				if !cmd.early {
					time.Sleep(time.Until(expires[i].Add(cmd.at)))
				}
				record(p, s.replicas[cmd.sender].send(tr.call(), 500*time.Millisecond))
			})
		}
	}
	wg.Go(func() {
		time.Sleep(time.Until(expires[0].Add(-100 * time.Millisecond)))
		s.replicas[1].kill()
	})
	wg.Go(func() {
		// The answers are lost until a second after the last lapse, then
		// the link resets every connection for a while: the completer's
		// lookups of the holds fail too, and are asked again.
		time.Sleep(time.Until(lapsesAt.Add(time.Second)))
		if err := s.toProvider.SetMode(faultproxy.Reset); err != nil {
			t.Error(err)
		}
		time.Sleep(300 * time.Millisecond)
	})
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	s.heal()

	// The careful clients finish every command; then the completer has
	// what nobody retried, and the lapses to record.
	var settle sync.WaitGroup
	for _, p := range plans {
		for _, tr := range append(append([]plannedTransition{}, p.captures...), p.voids...) {
			settle.Go(func() { record(p, s.settle(tr.transitionOp, 30*time.Second)...) })
		}
	}
	settle.Wait()
	ids := make([]int64, len(plans))
	for i, p := range plans {
		ids[i] = p.payment.id
	}
	// Every hold has lapsed, been captured or voided by now; the
	// completer's runs record each lapse it hears of. What is left
	// AUTHORIZED after this bound, the checks below report.
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && (s.count(`SELECT count(*) FROM payment WHERE id = ANY($1) AND status = 'AUTHORIZED'`, ids) > 0 ||
		s.count(`SELECT count(*) FROM payment_transition WHERE payment_id = ANY($1) AND status = 'PENDING'`, ids) > 0 ||
		s.count(`SELECT count(*) FROM idempotency_record WHERE status = 'IN_PROGRESS'`) > 0) {
		time.Sleep(50 * time.Millisecond)
	}

	var v violations
	statuses := map[string]int{}
	for i, p := range plans {
		p.expiryDue = true
		v = append(v, c.checkTwoStep(p)...)
		var status string
		must(t, s.db.QueryRow(t.Context(), `SELECT status FROM payment WHERE id = $1`, p.payment.id).Scan(&status))
		statuses[status]++
		if commands[i].kind == "" && status != "EXPIRED" {
			v.add("payment %d (%s): nothing captured or voided it, and it is %s after its hold lapsed", p.payment.id, p.auth.ext, status)
		}
		if status != "EXPIRED" {
			continue
		}
		// The order of a lapsed hold is free: one new charge pays it.
		again := op{key: fmt.Sprintf("lapse-%d-again", i), order: p.auth.order, customer: p.auth.customer,
			amount: p.auth.amount, ext: fmt.Sprintf("pi_lapse_%d_again", i)}
		seen := s.settle(again, 20*time.Second)
		var body struct {
			Status string `json:"status"`
		}
		if len(seen) == 0 || seen[len(seen)-1].status != http.StatusCreated ||
			json.Unmarshal(seen[len(seen)-1].body, &body) != nil || body.Status != "SUCCEEDED" {
			v.add("order %d of EXPIRED payment %d: paying it again answered %v, want 201 SUCCEEDED", p.auth.order, p.payment.id, seen)
		}
		if n := len(s.provider.Ledger().Succeeded(again.ext)); n != 1 {
			v.add("order %d paid again: %d succeeded charges at the provider, want 1", p.auth.order, n)
		}
	}
	v = append(v, c.checkGlobal()...)
	// The test covers each outcome of a hold, or it covers less than it
	// says.
	for _, want := range []string{"SUCCEEDED", "VOIDED", "EXPIRED"} {
		if statuses[want] == 0 {
			v.add("no payment ended %s (%v): the test did not reach that outcome", want, statuses)
		}
	}
	t.Logf("lapsed holds: %v; provider lapses %d", statuses, s.provider.AuthorizationCounters().Expirations)
	require(t, v, "lapsed holds under faults")
}
