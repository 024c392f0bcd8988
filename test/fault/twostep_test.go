//go:build fault

package fault

// Two-step payments in the seeded rounds: a payment authorized before the
// burst (captureMethod manual) meets, in the burst and under the round's
// faults, several captures and voids at once, each under its own key and
// each sent several times at once with it, the captures with the
// provider's behaviours by their externalCaptureId's prefix (lost and late
// answers among them); some are abandoned to the completer. Once the
// capture that won has settled, a few refunds of it, often more than it
// took together. twostep_invariants_test.go checks the outcome.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// twoStepStream tells the two-step part's random stream from the rest of a
// round's: it is drawn apart, so that a seed's charges, refunds and faults
// are what they were before two-step payments joined the rounds.
const twoStepStream = 0x2575_7e9a_0000_0000

// twoStepShare is how many rounds have a two-step payment.
const twoStepShare = 0.3

// twoStepPlan is a round's two-step payment: what to send, and what the
// round made of it (filled in by runRound).
type twoStepPlan struct {
	auth      authOp
	authCents int
	captures  []plannedTransition
	voids     []plannedTransition
	// refunds are drawn here and sent once a capture won: each is a share
	// (in percent) of what it took, with the external refund's prefix.
	refunds []plannedRefundShare

	// What the round made of it.
	payment   paid
	refundOps []refundOp
	answers   []answer
	replays   []answer // the completed keys sent once more after the round
	// expiryDue: the completer had time to record a lapsed hold
	// (lapse_test.go; the rounds' holds outlive them).
	expiryDue bool
}

type plannedTransition struct {
	transitionOp
	senders   []int
	abandoned bool
}

type plannedRefundShare struct {
	key     string
	percent int
	ext     string
	senders []int
}

// capturePrefixes are the provider's behaviours by externalCaptureId.
var capturePrefixes = []struct {
	prefix string
	weight int
}{
	{"cap", 50}, {"drop_", 15}, {"slow_", 10}, {"decline_", 10}, {"gw502_", 5}, {"busy_", 10},
}

// authPrefixes are the authorization's: its voids inherit its reference,
// so a drop_ or slow_ one loses or delays a void's first answer too.
var authPrefixes = []struct {
	prefix string
	weight int
}{
	{"pi", 80}, {"drop_", 15}, {"slow_", 5},
}

func pickFrom(rng *rand.Rand, table []struct {
	prefix string
	weight int
}) string {
	total := 0
	for _, p := range table {
		total += p.weight
	}
	n := rng.IntN(total)
	for _, p := range table {
		if n < p.weight {
			return p.prefix
		}
		n -= p.weight
	}
	return table[0].prefix
}

// newTwoStepPlan draws the round's two-step payment, or nil for a round
// without one.
func newTwoStepPlan(seed uint64, round int) *twoStepPlan {
	rng, _ := roundRand(seed, round, twoStepStream)
	if rng.Float64() >= twoStepShare {
		return nil
	}
	cents := 100 * (100 + rng.IntN(900))
	p := &twoStepPlan{authCents: cents, auth: authOp{op{
		key: fmt.Sprintf("round-%d-auth", round), order: int64(7_000_000 + round), customer: int64(1 + rng.IntN(1000)),
		amount: fmt.Sprintf("%d.00", cents/100), ext: fmt.Sprintf("%s_round_%d_auth", pickFrom(rng, authPrefixes), round),
	}}}
	senders := func() []int {
		out := make([]int, 1+rng.IntN(3))
		for i := range out {
			out[i] = rng.IntN(3)
		}
		return out
	}
	for i := range 1 + rng.IntN(3) {
		c := cents * (30 + rng.IntN(71)) / 100
		if rng.Float64() < 0.08 {
			c = cents + 100 // above the authorization: refused, nothing stored
		}
		p.captures = append(p.captures, plannedTransition{transitionOp: transitionOp{
			kind: "capture", key: fmt.Sprintf("round-%d-capture-%d", round, i),
			amount: fmt.Sprintf("%d.%02d", c/100, c%100), ref: fmt.Sprintf("%s_round_%d_capture_%d", pickFrom(rng, capturePrefixes), round, i),
		}, senders: senders(), abandoned: rng.Float64() < 0.08})
	}
	for i := range rng.IntN(3) {
		p.voids = append(p.voids, plannedTransition{transitionOp: transitionOp{kind: "void", key: fmt.Sprintf("round-%d-void-%d", round, i)},
			senders: senders(), abandoned: rng.Float64() < 0.08})
	}
	for i := range rng.IntN(3) {
		p.refunds = append(p.refunds, plannedRefundShare{key: fmt.Sprintf("round-%d-2s-refund-%d", round, i), percent: 40 + rng.IntN(31),
			ext: fmt.Sprintf("%s_round_%d_2s_refund_%d", pick(rng), round, i), senders: senders()})
	}
	// Drawn last, so that a seed's earlier draws are what they were: now
	// and then one capture or void is sent by identicalBurst senders at
	// once, one key and one body, across the replicas. Each must get the
	// key's stored answer or "in progress", never a refusal because a
	// duplicate read the payment after its own key's transition moved it.
	var transitions []*plannedTransition
	for i := range p.captures {
		transitions = append(transitions, &p.captures[i])
	}
	for i := range p.voids {
		transitions = append(transitions, &p.voids[i])
	}
	if rng.Float64() < 0.25 {
		t := transitions[rng.IntN(len(transitions))]
		t.senders = make([]int, identicalBurst)
		for i := range t.senders {
			t.senders[i] = i % 3
		}
	}
	return p
}

// identicalBurst is how many identical requests a burst sends at once.
const identicalBurst = 20

// kinds names what the two-step payment adds to a round, for the run's
// totals.
func (p *twoStepPlan) kinds() []string {
	k := []string{"two-step"}
	if prefix, _, _ := strings.Cut(p.auth.ext, "_round"); prefix != "pi" {
		k = append(k, "two-step:auth-"+strings.TrimSuffix(prefix, "_"))
	}
	if len(p.captures)+len(p.voids) > 1 {
		k = append(k, "two-step:concurrent-keys")
	}
	if len(p.captures) > 0 && len(p.voids) > 0 {
		k = append(k, "two-step:capture-racing-void")
	}
	for _, t := range append(append([]plannedTransition{}, p.captures...), p.voids...) {
		switch {
		case len(t.senders) >= identicalBurst:
			k = append(k, "two-step:"+t.kind+"-identical-burst")
		case len(t.senders) > 1:
			k = append(k, "two-step:"+t.kind+"-duplicates")
		}
		if t.abandoned {
			k = append(k, "two-step:"+t.kind+"-abandoned")
		}
		if prefix, _, ok := strings.Cut(t.ref, "_round"); ok && prefix != "cap" {
			k = append(k, "two-step:capture-"+strings.TrimSuffix(prefix, "_"))
		}
		if t.kind == "capture" && amountCents(t.amount) > p.authCents {
			k = append(k, "two-step:capture-above-authorization")
		}
	}
	if len(p.refunds) > 0 {
		k = append(k, "two-step:refunds")
	}
	return k
}

func (p *twoStepPlan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "two-step %s %s of %s:", p.auth.key, p.auth.ext, p.auth.amount)
	for _, t := range append(append([]plannedTransition{}, p.captures...), p.voids...) {
		fmt.Fprintf(&b, " %s %s %s %s senders %v", t.kind, t.key, t.amount, t.ref, t.senders)
		if t.abandoned {
			b.WriteString(" abandoned")
		}
		b.WriteString(";")
	}
	for _, r := range p.refunds {
		fmt.Fprintf(&b, " refund %s %d%% %s senders %v;", r.key, r.percent, r.ext, r.senders)
	}
	return b.String()
}

// keys are every idempotency key of the two-step payment's commands.
func (p *twoStepPlan) keys() []string {
	keys := []string{p.auth.key}
	for _, t := range append(append([]plannedTransition{}, p.captures...), p.voids...) {
		keys = append(keys, t.key)
	}
	for _, r := range p.refunds {
		keys = append(keys, r.key)
	}
	return keys
}

func amountCents(amount string) int {
	var units, cents int
	_, _ = fmt.Sscanf(amount, "%d.%d", &units, &cents)
	return units*100 + cents
}

// authOp is the authorization of a two-step payment: a charge with
// captureMethod manual.
type authOp struct{ op }

func (a authOp) call() call {
	b, _ := json.Marshal(map[string]any{
		"orderId": a.order, "customerId": a.customer, "amount": a.amount, "currency": "RUB",
		"paymentProvider": "sandbox", "externalPaymentId": a.ext, "captureMethod": "manual",
	})
	return call{key: a.key, client: a.client(), bearer: bearerOf(a.apiKey), path: "/payments", body: b}
}

// transitionOp is one capture or void of a careful client: one key, one
// body.
type transitionOp struct {
	kind   string // capture or void
	key    string
	amount string // a capture's
	ref    string // a capture's externalCaptureId
	paid   paid
}

func (t transitionOp) call() call {
	body := []byte("{}")
	path := fmt.Sprintf("/payments/%d/voids", t.paid.id)
	if t.kind == "capture" {
		body, _ = json.Marshal(map[string]any{"amount": t.amount, "currency": "RUB", "externalCaptureId": t.ref})
		path = fmt.Sprintf("/payments/%d/captures", t.paid.id)
	}
	return call{key: t.key, client: t.paid.client(), bearer: bearerOf(t.paid.apiKey), path: path, body: body, transition: true}
}

// authorize settles the authorization with no fault armed (its own
// prefix's excepted, which a retry gets past) and returns its payment.
func (s *stack) authorize(a authOp) paid {
	s.t.Helper()
	s.addOrder(a.op)
	seen := s.settle(a, 20*time.Second)
	if len(seen) == 0 {
		s.t.Fatalf("authorization %s: no attempt made", a.key)
	}
	last := seen[len(seen)-1]
	var body struct {
		ID     int64  `json:"id"`
		Status string `json:"status"`
	}
	if last.status != http.StatusCreated || json.Unmarshal(last.body, &body) != nil || body.ID == 0 || body.Status != "AUTHORIZED" {
		s.t.Fatalf("authorization %s: %s, want 201 AUTHORIZED", a.key, last)
	}
	return paid{op: a.op, id: body.ID}
}

// capturedCents reads what the payment's capture took, if it is SUCCEEDED.
func (s *stack) capturedCents(id int64) (int, bool) {
	var status string
	var captured *string
	if err := s.db.QueryRow(context.Background(), `SELECT status, captured_amount::text FROM payment WHERE id = $1`, id).Scan(&status, &captured); err != nil ||
		status != "SUCCEEDED" || captured == nil {
		return 0, false
	}
	units, frac, _ := strings.Cut(*captured, ".")
	var u, c int
	_, _ = fmt.Sscanf(units, "%d", &u)
	if len(frac) >= 2 {
		_, _ = fmt.Sscanf(frac[:2], "%d", &c)
	}
	return u*100 + c, true
}

// refundCapture sends the plan's refunds of the capture that won, if one
// did by now (an abandoned one may still be the completer's): each sent
// several times at once with its key, then settled; together they often
// ask for more than the capture took.
func (s *stack) refundCapture(p *twoStepPlan, record func(...answer)) {
	captured, ok := s.capturedCents(p.payment.id)
	if !ok || len(p.refunds) == 0 {
		return
	}
	var first, settle sync.WaitGroup
	for _, r := range p.refunds {
		cents := max(1, captured*r.percent/100)
		o := refundOp{key: r.key, amount: fmt.Sprintf("%d.%02d", cents/100, cents%100), ext: r.ext, paid: p.payment}
		p.refundOps = append(p.refundOps, o)
		for _, to := range r.senders {
			first.Go(func() { record(s.replicas[to].refund(o, 500*time.Millisecond)) })
		}
	}
	first.Wait()
	for _, o := range p.refundOps {
		settle.Go(func() { record(s.settle(o, 30*time.Second)...) })
	}
	settle.Wait()
}

// The final answers of a capture or a void beside the stored outcomes
// (api/openapi.yaml): transitionDecided are stored (the provider declined
// or refused it for good), transitionRefused store nothing (another
// capture or void won, or the capture does not fit the authorization).
var (
	transitionDecided = map[string]bool{"capture-declined": true, "capture-failed": true, "void-declined": true, "void-failed": true}
	transitionRefused = map[string]bool{"payment-not-authorized": true, "capture-mismatch": true}
)

// codeTransitionInProgress asks the client to come back with the same key:
// another capture or void of the payment is being made.
const codeTransitionInProgress = "payment-transition-in-progress"
