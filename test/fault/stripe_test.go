//go:build fault

package fault

// The properties proven against the sandbox, again against Stripe: the
// real binary with PAYMENT_PROVIDER=stripe, its Stripe link through the
// fault proxy to the stateful fake (internal/stripefake: Stripe's
// idempotency layer, PaymentIntents, refunds, List and signed events), the
// fake's events delivered to the first replica's POST /webhooks/stripe
// through that replica's front proxy. The invariants are the same ones
// (invariants_test.go, refund_invariants_test.go), held to the fake's
// ledger: per external payment at most one PaymentIntent, whatever its
// key; each PaymentIntent and refund a row with its decision and amount;
// no decided row without its PaymentIntent or refund.
//
// What differs is Stripe's kind (decision 0034, LooksUp): it acts on a
// request however late it arrives, so a resumed refusal whose lookup finds
// nothing is no proof: the payment stays PENDING, answered 503
// outcome-unknown, until a retry's or the completer's lookup finds it or
// the webhook settles it.

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/example/payment-service/internal/faultproxy"
	"github.com/example/payment-service/internal/stripefake"
)

// The payment methods of the Stripe fake the properties use.
const (
	pmVisa     = stripefake.PMVisa
	pmDeclined = stripefake.PMDeclined
)

// stripeCharges are charges through Stripe named after test, one a
// payment method of pms, for orders from order on.
func stripeCharges(test string, order int64, pms ...string) []op {
	ops := make([]op, len(pms))
	for i, pm := range pms {
		ops[i] = op{key: fmt.Sprintf("%s-%d", test, i), order: order + int64(i), customer: 13,
			amount: fmt.Sprintf("%d.25", 20+i), ext: fmt.Sprintf("pi_%s_%d", test, i), pm: pm}
	}
	return ops
}

// ordered adds the orders of ops to the projection, and returns ops.
func (s *stack) ordered(ops []op) []op {
	for _, o := range ops {
		s.addOrder(o)
	}
	return ops
}

// unknownOrRecorded is the first answer of a call whose answer Stripe
// lost: 503 outcome-unknown, or the decision (201, 402) that Stripe's
// event recorded while the call was out.
func unknownOrRecorded(a answer) bool {
	return a.err == nil && (a.status == http.StatusCreated || a.status == http.StatusPaymentRequired ||
		a.status == http.StatusServiceUnavailable && a.code == "outcome-unknown" && a.retryAfter != "")
}

// pauseWebhooks keeps Stripe's events from the service, made and queued,
// until resumeWebhooks: for a step that only a lookup, a retry or the
// completer may settle.
func (s *stack) pauseWebhooks() { s.stripe.SetWebhookURL("") }

func (s *stack) resumeWebhooks() { s.stripe.SetWebhookURL(s.replicas[0].url + "/webhooks/stripe") }

// executed is how many POSTs Stripe executed under key.
func (s *stack) executed(key string) int { return s.stripe.Ledger().Executed[key] }

// status is the payment's status for an external payment, "" if none.
func (s *stack) status(ext string) string {
	var st string
	_ = s.db.QueryRow(s.t.Context(), `SELECT status FROM payment WHERE external_payment_id = $1`, ext).Scan(&st)
	return st
}

func TestStripeProperties(t *testing.T) {
	s := newStack(t, stackOptions{replicas: 3, stripe: true})
	c := newChecker(s)
	f := s.stripe

	// The same request 20 times at once, spread over the replicas: one
	// claim, one POST to Stripe, one PaymentIntent; every answer the
	// stored one or 409 request-in-progress.
	t.Run("20 identical requests at once", func(t *testing.T) {
		ops := s.ordered(stripeCharges("same", 8000, pmVisa, pmVisa, pmVisa, pmDeclined))
		// Stripe answers in 60 ms: the claims stay open for duplicates.
		s.toProvider.SetDelay(30 * time.Millisecond)
		answers := make([]answer, 20*len(ops))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range answers {
			o, r := ops[i%len(ops)], s.replicas[i%3]
			wg.Go(func() { <-start; answers[i] = r.charge(o, 10*time.Second) })
		}
		close(start)
		wg.Wait()
		s.toProvider.SetDelay(0)
		met := 0
		for _, a := range answers {
			switch {
			case a.err != nil:
				t.Fatalf("%s: no answer with no fault injected", a)
			case a.replayed, a.status == http.StatusConflict && a.code == "request-in-progress":
				met++
			case a.final() && a.status != http.StatusCreated && a.status != http.StatusPaymentRequired:
				// Retryable answers are checked with the rest (check): a
				// loaded machine may outlast the call's bound.
				t.Errorf("a copy of the request got %s", a)
			}
		}
		if met == 0 {
			t.Fatal("no copy met a running or finished charge: the test did not test")
		}
		for _, o := range ops {
			if n := s.executed(o.providerKey()); n != 1 {
				t.Errorf("%s: Stripe executed %d POSTs under its key, want 1", o.key, n)
			}
			answers = append(answers, s.settle(o, 20*time.Second)...)
		}
		require(t, c.check(ops, answers), "20 at once")
		require(t, c.checkGlobal(), "20 at once")
	})

	// Two keys for one external payment, at once or the second after the
	// first's answer was lost: one payment, one PaymentIntent; the second
	// key answers what the first recorded (200), or in progress until then.
	t.Run("two keys for one external payment", func(t *testing.T) {
		firsts := s.ordered(stripeCharges("twokeys", 8100, pmVisa, pmVisa, pmVisa, pmVisa))
		var ops, seconds []op
		for _, o := range firsts {
			second := o
			second.key += "-again"
			ops, seconds = append(ops, o, second), append(seconds, second)
		}
		must(t, s.replicas[2].front.SetMode(faultproxy.LoseResponses))
		var answers []answer
		var mu sync.Mutex
		var wg sync.WaitGroup
		keep := func(a answer) { mu.Lock(); answers = append(answers, a); mu.Unlock() }
		for i, o := range firsts {
			if i%2 == 0 { // at once, on two replicas
				wg.Go(func() { keep(s.replicas[0].charge(o, 5*time.Second)) })
				wg.Go(func() { keep(s.replicas[1].charge(seconds[i], 5*time.Second)) })
				continue
			}
			// The first's answer lost, then a new key.
			wg.Go(func() {
				a := s.replicas[2].charge(o, 5*time.Second)
				wantNoAnswer(t, a)
				keep(a)
				keep(s.replicas[0].charge(seconds[i], 5*time.Second))
			})
		}
		wg.Wait()
		s.heal()
		for _, o := range ops {
			answers = append(answers, s.settle(o, 20*time.Second)...)
		}
		recorded := 0
		for _, a := range answers {
			if a.status == http.StatusOK {
				recorded++
			}
		}
		if recorded == 0 {
			t.Error("no second key was answered with the payment already recorded (200)")
		}
		require(t, c.check(ops, answers), "two keys")
		require(t, c.checkGlobal(), "two keys")
	})

	// Answers lost on the client link, on the Stripe link, and by Stripe
	// itself (a dropped connection, the 500 it saves and replays for 24 h,
	// a gateway's 502 after it acted, an answer later than the service
	// waits); and a Stripe link that refuses. The first answer is what is
	// true; the careful client's retries, Stripe's replays and its events
	// end each with one PaymentIntent.
	t.Run("lost answers", func(t *testing.T) {
		cases := []struct {
			name    string
			fault   func(ops []op)
			first   func(a answer) bool
			charged bool
		}{
			{"client <-> service", func([]op) { s.forEachFront(faultproxy.LoseResponses) }, func(a answer) bool { return a.err != nil }, true},
			{"service <-> Stripe", func([]op) { must(t, s.toProvider.SetMode(faultproxy.LoseResponses)) }, unknownOrRecorded, true},
			{"Stripe drops the connection", stripeFault(f, stripefake.FaultDrop), unknownOrRecorded, true},
			{"Stripe's saved 500", stripeFault(f, stripefake.Fault500), unknownOrRecorded, true},
			{"a gateway's 502 after Stripe acted", stripeFault(f, stripefake.FaultGateway502), unknownOrRecorded, true},
			{"Stripe answers too late", stripeFault(f, stripefake.FaultSlow), unknownOrRecorded, true},
			{"the Stripe link refuses", func([]op) { must(t, s.toProvider.SetMode(faultproxy.Refuse)) }, func(a answer) bool {
				return a.status == http.StatusServiceUnavailable && a.code == "provider-unavailable" && a.retryAfter != ""
			}, false},
		}
		for ci, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				ops := s.ordered(stripeCharges(fmt.Sprintf("lost%d", ci), int64(8200+10*ci), pmVisa, pmVisa, pmDeclined))
				answers := loseFirstAnswers(s, t, func() { tc.fault(ops) }, ops, func(i int) (bool, bool) {
					return len(s.ledger.chargesFor(ops[i].ext)) > 0, tc.charged
				}, func(t *testing.T, a answer) {
					if !tc.first(a) {
						t.Errorf("%s: not the true first answer of %s", a, tc.name)
					}
				})
				for _, o := range ops {
					answers = append(answers, s.settle(o, 20*time.Second)...)
				}
				require(t, c.check(ops, answers), tc.name)
				require(t, c.checkGlobal(), tc.name)
			})
		}
	})

	// A resumed refusal whose lookup finds nothing: the first request is
	// still on its way to Stripe (held, not executed), each retry is
	// refused, for now (429) or for good (400: a refusal of that request
	// only), and lists nothing. The payment stays PENDING, every answer
	// 503 outcome-unknown, never FAILED nor declined: Stripe acts on the
	// first request later. Then it does: one is found by the lookup of
	// the next attempt, refused for now again (the client's retry, or the
	// completer's if it came first), with Stripe's events still held
	// back; the other is settled with no client retry at all, by Stripe's
	// event or the completer.
	t.Run("unknown, then settled", func(t *testing.T) {
		ops := s.ordered(stripeCharges("unknown", 8300, pmVisa, pmVisa))
		s.pauseWebhooks()
		t.Cleanup(func() { // also when the subtest stops early
			for _, o := range ops {
				f.Release(o.providerKey())
			}
			s.resumeWebhooks()
		})
		var answers []answer
		for _, o := range ops {
			f.FailNext(o.providerKey(), stripefake.FaultHold, stripefake.FaultRateLimit, stripefake.FaultInvalid, stripefake.FaultRateLimit)
			for i := range 4 {
				a := s.replicas[i%3].charge(o, 5*time.Second)
				answers = append(answers, a)
				wantCode(t, a, http.StatusServiceUnavailable, "outcome-unknown")
			}
			if st := s.status(o.ext); st != "PENDING" || len(s.ledger.chargesFor(o.ext)) != 0 {
				t.Errorf("%s while Stripe holds its request: payment %s, Stripe %+v; want PENDING and nothing", o.key, st, s.ledger.chargesFor(o.ext))
			}
		}
		// Stripe acts on the held requests now.
		for _, o := range ops {
			f.Release(o.providerKey())
			waitFor(t, 5*time.Second, "Stripe executing "+o.key, func() bool { return s.executed(o.providerKey()) == 1 })
		}
		// The first: the next attempt is refused for now again, and its
		// lookup finds it.
		f.FailNext(ops[0].providerKey(), stripefake.FaultRateLimit)
		a := s.replicas[1].charge(ops[0], 5*time.Second)
		answers = append(answers, a)
		if a.status != http.StatusCreated {
			t.Errorf("%s: the retry after Stripe acted, want 201", a)
		}
		if n := s.executed(ops[0].providerKey()); n != 1 {
			t.Errorf("%s: Stripe executed %d POSTs under its key, want 1", ops[0].key, n)
		}
		// The second: no client retry.
		s.resumeWebhooks()
		// Not fatal: the invariants below say what is wrong if it is not.
		if !eventually(10*time.Second, func() bool { return s.status(ops[1].ext) == "SUCCEEDED" }) {
			t.Errorf("%s: not SUCCEEDED 10s after Stripe acted, but %s", ops[1].key, s.status(ops[1].ext))
		}
		for _, o := range ops {
			answers = append(answers, s.settle(o, 20*time.Second)...)
		}
		require(t, c.check(ops, answers), "unknown, then settled")
		require(t, c.checkGlobal(), "unknown, then settled")
	})

	// Stripe's event arrives before the call's answer: with the Stripe
	// link slow (the answer comes in time, after the event was applied)
	// and with Stripe answering later than the service waits. The event
	// and the call record one decision once: one answer, stored, one
	// outbox event; no retry reaches Stripe.
	t.Run("a webhook before the answer", func(t *testing.T) {
		slowLink := s.ordered(stripeCharges("hookfirst", 8400, pmVisa, pmDeclined))
		late := s.ordered(stripeCharges("hooklate", 8410, pmVisa, pmVisa))
		s.toProvider.SetDelay(100 * time.Millisecond)
		var answers []answer
		for i, o := range slowLink {
			a := s.replicas[1+i%2].charge(o, 5*time.Second)
			answers = append(answers, a)
			if !unknownOrRecorded(a) {
				t.Errorf("%s: want the decision (or, if the slow link outlasted the call, 503 outcome-unknown)", a)
			}
		}
		s.toProvider.SetDelay(0)
		for i, o := range late {
			f.FailNext(o.providerKey(), stripefake.FaultSlow)
			a := s.replicas[1+i%2].charge(o, 5*time.Second)
			answers = append(answers, a)
			if !unknownOrRecorded(a) {
				t.Errorf("%s: want 503 outcome-unknown or the 201 the event recorded", a)
			}
			waitFor(t, 10*time.Second, "the webhook settling "+o.key, func() bool { return s.status(o.ext) == "SUCCEEDED" })
		}
		for _, o := range append(slowLink, late...) {
			if n := f.Received(o.providerKey()); n != 1 {
				t.Errorf("%s: Stripe received %d POSTs under its key before any retry, want 1", o.key, n)
			}
			seen := s.settle(o, 20*time.Second)
			if last := seen[len(seen)-1]; !last.replayed {
				t.Errorf("%s: the retry after the event got %s, want the stored answer replayed", o.key, last)
			}
			answers = append(answers, seen...)
		}
		require(t, c.check(append(slowLink, late...), answers), "webhook first")
		require(t, c.checkGlobal(), "webhook first")
	})

	// The completer with Stripe, its events held back: abandoned charges
	// and refunds whose answers were lost, nobody retrying them. The
	// completer sends each again (Stripe replays what it did), or, when
	// its attempt is refused for now, looks it up: the List of
	// PaymentIntents for a charge, the refunds of the PaymentIntent for a
	// refund.
	t.Run("the completer", func(t *testing.T) {
		charges := stripeCharges("completer", 8500, pmVisa, pmVisa, pmVisa)
		paid := s.pay(charges[:1])
		abandoned := s.ordered(charges[1:])
		s.pauseWebhooks()
		t.Cleanup(s.resumeWebhooks)
		refunds := []refundOp{
			{key: "completer-refund-0", amount: "5.10", ext: "re_completer_0", paid: paid[0]},
			{key: "completer-refund-1", amount: "6.20", ext: "re_completer_1", paid: paid[0]},
		}
		f.FailNext(refunds[0].providerKey(), stripefake.FaultDrop)
		f.FailNext(refunds[1].providerKey(), stripefake.FaultDrop, stripefake.FaultRateLimit)
		f.FailNext(abandoned[0].providerKey(), stripefake.FaultDrop)
		f.FailNext(abandoned[1].providerKey(), stripefake.FaultDrop, stripefake.FaultRateLimit)
		var answers []answer
		for i, r := range refunds {
			answers = append(answers, s.replicas[i%3].refund(r, 5*time.Second))
		}
		for i, o := range abandoned {
			answers = append(answers, s.replicas[i%3].charge(o, 5*time.Second))
		}
		for _, a := range answers {
			wantCode(t, a, http.StatusServiceUnavailable, "outcome-unknown")
		}
		waitFor(t, 20*time.Second, "the completer finishing what nobody retried", func() bool {
			return s.count(`SELECT count(*) FROM refund WHERE status = 'PENDING'`) == 0 &&
				s.count(`SELECT count(*) FROM payment WHERE status = 'PENDING'`) == 0
		})
		providerKeys := []string{refunds[0].providerKey(), refunds[1].providerKey(), abandoned[0].providerKey(), abandoned[1].providerKey()}
		for _, key := range providerKeys {
			if n := f.Received(key); n < 2 || s.executed(key) != 1 {
				t.Errorf("%s: Stripe received %d POSTs and executed %d; want the completer's too, and one executed", key, n, s.executed(key))
			}
		}
		require(t, c.check(charges, answers), "the completer")
		require(t, c.checkRefunds(refunds, answers), "the completer")
		require(t, c.checkGlobal(), "the completer")
	})

	t.Run("kill -9 mid call", func(t *testing.T) { stripeKill(t, s, c) })

	// Every event delivered, each applied once, none contradicting what
	// the service recorded.
	waitFor(t, 30*time.Second, "every Stripe event delivered", func() bool { return f.Undelivered() == 0 })
	if n := s.count(`SELECT count(*) FROM provider_event_contradiction`); n != 0 {
		t.Errorf("%d Stripe events contradict what the service recorded", n)
	}
	t.Logf("Stripe: %d PaymentIntents, %d events, %d deliveries; %d events applied (processed_event)",
		f.PaymentIntents(), len(f.Events()), f.Delivered(), s.count(`SELECT count(*) FROM processed_event WHERE consumer_name = 'webhook:stripe'`))
}

// eventually polls cond every 20 ms until it holds (true) or within
// passes (false).
func eventually(within time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(within); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// stripeFault queues fault for the first POST under each op's key.
func stripeFault(f *stripefake.Server, fault stripefake.Fault) func(ops []op) {
	return func(ops []op) {
		for _, o := range ops {
			f.FailNext(o.providerKey(), fault)
		}
	}
}

// stripeKill: kill -9 of the replica Stripe's events go to, in the middle
// of a burst, at each point where a crash leaves something behind:
//
//   - between the claim and the call (the Stripe link black-holed):
//     Stripe holds nothing; the completer sends the abandoned half;
//   - during the call (Stripe executes, its answer comes late), its
//     events held back until the replica is back: the client's half
//     replayed by Stripe, the abandoned half settled by the events or the
//     completer;
//   - refunds during the call, events held back: the client's half and
//     the completer's half each replayed by Stripe.
//
// Each time, half is retried by the client and half by nobody; in the
// end each operation is made once at Stripe and completed.
func stripeKill(t *testing.T, s *stack, c *checker) {
	victim := s.replicas[0]
	f := s.stripe
	t.Cleanup(s.resumeWebhooks) // also when the test stops early

	// Between the claim and the call.
	ops := s.ordered(stripeCharges("killclaim", 8600, pmVisa, pmVisa, pmVisa, pmVisa, pmVisa, pmDeclined))
	must(t, s.toProvider.SetMode(faultproxy.Blackhole))
	wait := burst(s, victim, ops)
	waitFor(t, 5*time.Second, "the kill point: between claim and call", func() bool {
		return s.claimed(ops) == len(ops) && every(ops, func(o op) bool { return f.Received(o.providerKey()) == 0 })
	})
	victim.kill()
	answers := wait()
	s.heal()
	s.leftPending(t, "between claim and call", "payment", "external_payment_id", "pi_killclaim")
	answers = append(answers, settleHalf(s, ops, "payments")...)
	require(t, c.check(ops, answers), "between claim and call")
	require(t, c.checkGlobal(), "between claim and call")
	s.allCompleted(t, "between claim and call", keysOf(ops))

	// During the call: the abandoned half settled by Stripe's events or
	// the completer, whichever comes first.
	ops = s.ordered(stripeCharges("killcall", 8700, pmVisa, pmVisa, pmVisa, pmVisa, pmVisa, pmDeclined))
	answers = killDuringCall(t, s, victim, "during the call", ops, "payment", "external_payment_id", "pi_killcall", true)
	require(t, c.check(ops, answers), "during the call")
	require(t, c.checkGlobal(), "during the call")

	// Refunds during the call: the abandoned half settled by the completer
	// alone, the events held back until it is done.
	paid := s.pay(stripeCharges("killrefund", 8800, pmVisa, pmVisa))
	var refunds []refundOp
	for i, p := range paid {
		for j := range 2 {
			refunds = append(refunds, refundOp{key: fmt.Sprintf("killrefund-%d-%d", i, j), amount: fmt.Sprintf("%d.25", 5+j),
				ext: fmt.Sprintf("re_killrefund_%d_%d", i, j), paid: p})
		}
	}
	answers = killDuringCall(t, s, victim, "refunds during the call", refunds, "refund", "external_refund_id", "re_killrefund", false)
	require(t, c.checkRefunds(refunds, answers), "refunds during the call")
	require(t, c.checkGlobal(), "refunds during the call")
}

// killDuringCall kills victim in a burst of items once Stripe has
// executed each one's POST (its answer late, FaultSlow; its events held
// back) and none is completed, heals, and lets the client settle half of
// them; the other half is settled by Stripe's events (eventsSettle, which
// are let through once the replica is back) or by the completer (the
// events only after). It returns every answer.
func killDuringCall[O interface {
	operation
	providerKey() string
}](t *testing.T, s *stack, victim *replica, name string, items []O, table, column, ref string, eventsSettle bool) []answer {
	s.pauseWebhooks()
	for _, o := range items {
		s.stripe.FailNext(o.providerKey(), stripefake.FaultSlow)
	}
	wait := burst(s, victim, items)
	waitFor(t, 5*time.Second, "the kill point: "+name, func() bool {
		return every(items, func(o O) bool { return s.executed(o.providerKey()) == 1 }) && s.completed(keysOf(items)) == 0
	})
	victim.kill()
	answers := wait()
	s.heal()
	s.leftPending(t, name, table, column, ref)
	if eventsSettle {
		s.resumeWebhooks()
	}
	answers = append(answers, settleHalf(s, items, table+"s")...)
	s.resumeWebhooks()
	s.allCompleted(t, name, keysOf(items))
	return answers
}
