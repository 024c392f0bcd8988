//go:build fault

package fault

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/example/payment-service/internal/faultproxy"
)

// kill -9 of a replica in the middle of a burst, at each point of a charge
// where a crash leaves something behind:
//
//   - between the claim and the provider call: the key is claimed and the
//     payment reserved, and the provider has seen nothing (the provider link
//     is a black hole, so requests are stuck before it);
//   - during the call: the provider has charged and the answer is on its way
//     (slow_ references: the answer comes late);
//   - between the call and the record: the provider has answered and phase 3
//     waits for a row lock the test holds on the key's record.
//
// Then the careful client retries half of the operations with the same key
// on the surviving replicas, and the other half are never retried: the
// completer must finish those. In the end every operation is charged
// exactly once, has one final payment, one stored answer and one event, and
// nothing is IN_PROGRESS or PENDING.
func TestKillMidBurst(t *testing.T) {
	s := newStack(t, stackOptions{replicas: 3})
	c := newChecker(s)
	victim := s.replicas[0]

	const perPhase = 10
	phases := []killPoint[op]{
		{
			name: "between claim and provider call",
			ref:  "pi_kc",
			arm: func() {
				must(t, s.toProvider.SetMode(faultproxy.Blackhole))
			},
			ready: func(ops []op) bool {
				return s.claimed(ops) == len(ops) && s.provider.Counters().Requests == 0
			},
		},
		{
			name: "during the provider call",
			ref:  "slow_kd",
			arm:  func() {},
			ready: func(ops []op) bool {
				charged := every(ops, func(o op) bool { _, ok := s.provider.Lookup(o.providerKey()); return ok })
				return charged && s.claimed(ops) == len(ops) && s.completed(keysOf(ops)) == 0
			},
		},
		{
			name: "between provider call and record",
			ref:  "pi_kr",
			arm: func() {
				// The provider's answer takes 2 x 150 ms through the link:
				// time for the test to lock the claimed records.
				s.toProvider.SetDelay(150 * time.Millisecond)
			},
			ready: func(ops []op) bool {
				for _, o := range ops {
					if _, ok := s.provider.Lookup(o.providerKey()); !ok {
						return false
					}
				}
				return s.waitingOnLocks() == len(ops)
			},
		},
	}

	var all []op
	for pi, ph := range phases {
		t.Logf("phase %d: kill -9 %s", pi, ph.name)
		var ops []op
		for i := range perPhase {
			o := op{key: fmt.Sprintf("kill-%d-%d", pi, i), order: int64(2000 + 100*pi + i), customer: 9,
				amount: fmt.Sprintf("%d.50", 20+i), ext: fmt.Sprintf("%s_%d", ph.ref, i)}
			s.addOrder(o)
			ops = append(ops, o)
		}
		all = append(all, ops...)
		ph.arm()

		wait := burst(s, victim, ops)
		var locks *lockedRecords
		if pi == 2 {
			// Lock each record as soon as it is claimed, before the
			// provider's delayed answer arrives and phase 3 runs.
			waitFor(t, 5*time.Second, "claims", func() bool { return s.claimed(ops) == len(ops) })
			locks = s.lockRecords(ops)
		}
		waitFor(t, 5*time.Second, "the kill point: "+ph.name, func() bool { return ph.ready(ops) })
		victim.kill()
		if locks != nil {
			// PostgreSQL notices a dead client only when it next talks to
			// it, so the killed replica's phase 3 statements would run to
			// their end once the lock goes. Their sessions are ended first,
			// as a server's keepalive (or client_connection_check_interval)
			// ends a crashed client's: the crash lands before the record.
			s.count(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%idempotency_record%'`)
			waitFor(t, 5*time.Second, "the killed replica's statements to end", func() bool { return s.waitingOnLocks() == 0 })
			locks.release()
		}
		// What the crash left: every op claimed, its payment PENDING.
		answers := afterKill(t, s, ph, wait, ops, "payment", "external_payment_id")
		require(t, c.check(ops, answers), ph.name)
		require(t, c.checkGlobal(), ph.name)
		s.allCompleted(t, ph.name, keysOf(ops))
	}
	if got := s.provider.Counters().Charges; got != len(all) {
		t.Fatalf("the provider made %d charges for %d operations", got, len(all))
	}
	killMidRefunds(t, s, c)
}

// killMidRefunds: kill -9 of a replica while refunds are in flight, at the
// two points where a refund's crash leaves something behind: between the
// reservation (a PENDING refund counted in refund_reserved, its key
// claimed) and the provider call, and during the call, once the provider
// has refunded. Two refunds of each payment, with different keys, run at
// once. Then, as for charges, the client retries half of them and the
// completer must finish the other half; in the end each refund is made
// once, recorded SUCCEEDED, announced once, and nothing stays reserved
// that is not refunded.
func killMidRefunds(t *testing.T, s *stack, c *checker) {
	victim := s.replicas[0]
	made := 0
	phases := []killPoint[refundOp]{
		{
			name: "refunds between reservation and provider call",
			ref:  "pi_krc",
			arm:  func() { must(t, s.toProvider.SetMode(faultproxy.Blackhole)) },
			ready: func(refunds []refundOp) bool {
				return s.reservedRefunds(refunds) == len(refunds) && s.provider.RefundCounters().Requests == made
			},
		},
		{
			name: "refunds during the provider call",
			ref:  "slow_krd",
			arm:  func() {},
			ready: func(refunds []refundOp) bool {
				refunded := every(refunds, func(r refundOp) bool { _, ok := s.provider.LookupRefund(r.providerKey()); return ok })
				return refunded && s.completed(keysOf(refunds)) == 0
			},
		},
	}
	for pi, ph := range phases {
		t.Logf("refund phase %d: kill -9 %s", pi, ph.name)
		charges := toRefund(fmt.Sprintf("kill-refund-%d", pi), 5, int64(2500+100*pi), 9)
		var refunds []refundOp
		for i, p := range s.pay(charges) {
			for j := range 2 {
				refunds = append(refunds, refundOp{key: fmt.Sprintf("kill-refund-%d-%d-%d", pi, i, j), amount: fmt.Sprintf("%d.25", 10+j),
					ext: fmt.Sprintf("%s_%d_%d", ph.ref, i, j), paid: p})
			}
		}
		made = s.provider.RefundCounters().Requests
		ph.arm()
		wait := burst(s, victim, refunds)
		waitFor(t, 5*time.Second, "the kill point: "+ph.name, func() bool { return ph.ready(refunds) })
		victim.kill()
		answers := afterKill(t, s, ph, wait, refunds, "refund", "external_refund_id")
		require(t, c.check(charges, nil), ph.name)
		require(t, c.checkRefunds(refunds, answers), ph.name)
		require(t, c.checkGlobal(), ph.name)
		s.allCompleted(t, ph.name, keysOf(refunds))
	}
}

// afterKill ends a phase once the victim is dead: the burst's answers,
// every fault healed, the check that the kill left a PENDING row in table,
// and then half of the items settled by the client and half by the
// completer (settleHalf). It returns every answer.
func afterKill[O operation](t *testing.T, s *stack, ph killPoint[O], wait func() []answer, items []O, table, column string) []answer {
	t.Helper()
	answers := wait()
	s.heal()
	s.leftPending(t, ph.name, table, column, ph.ref)
	return append(answers, settleHalf(s, items, table+"s")...)
}

// leftPending fails the test unless the kill left a PENDING row in table
// (payment or refund) whose external id (column) starts with ref: a kill
// that missed its point tests nothing.
func (s *stack) leftPending(t *testing.T, phase, table, column, ref string) {
	t.Helper()
	if n := s.count(`SELECT count(*) FROM `+table+` WHERE status = 'PENDING' AND `+column+` LIKE $1`, ref+"%"); n == 0 {
		t.Fatalf("%s: the kill left no PENDING %s: it missed the point", phase, table)
	}
}

// allCompleted fails the test unless every key holds its final answer: the
// abandoned half was finished by the completer, not by a client.
func (s *stack) allCompleted(t *testing.T, phase string, keys []string) {
	t.Helper()
	if n := s.completed(keys); n != len(keys) {
		t.Fatalf("%s: %d of %d keys completed", phase, n, len(keys))
	}
}

// every reports that f holds for every item.
func every[T any](items []T, f func(T) bool) bool {
	for _, it := range items {
		if !f(it) {
			return false
		}
	}
	return true
}

// killPoint is where a phase of the kill test kills the victim.
type killPoint[O operation] struct {
	name string
	ref  string // the prefix of the operations' external ids
	// arm prepares the fault before the burst; s.heal undoes it.
	arm func()
	// ready reports that the burst has reached the kill point.
	ready func(items []O) bool
}

// burst sends every item to the victim, and a duplicate of each to another
// replica a moment later; wait returns their answers once all have come.
func burst[O operation](s *stack, victim *replica, items []O) (wait func() []answer) {
	var (
		mu      sync.Mutex
		answers []answer
		wg      sync.WaitGroup
	)
	send := func(r *replica, o O, after time.Duration) {
		time.Sleep(after)
		a := r.send(o.call(), 5*time.Second)
		mu.Lock()
		answers = append(answers, a)
		mu.Unlock()
	}
	for i, o := range items {
		wg.Go(func() { send(victim, o, 0) })
		wg.Go(func() { send(s.replicas[1+i%2], o, 20*time.Millisecond) })
	}
	return func() []answer {
		wg.Wait()
		return answers
	}
}

// settleHalf: the careful client retries half of the items; nobody retries
// the other half, and the completer must finish them. It returns once
// nothing is IN_PROGRESS or PENDING any more, with the client's answers.
func settleHalf[O operation](s *stack, items []O, what string) []answer {
	var (
		mu      sync.Mutex
		answers []answer
		settle  sync.WaitGroup
	)
	for i, o := range items {
		if i%2 == 1 {
			continue
		}
		settle.Go(func() {
			seen := s.settle(o, 20*time.Second)
			mu.Lock()
			answers = append(answers, seen...)
			mu.Unlock()
		})
	}
	settle.Wait()
	waitFor(s.t, 30*time.Second, "the completer finishing the abandoned "+what, func() bool {
		return s.count(`SELECT count(*) FROM idempotency_record WHERE status = 'IN_PROGRESS'`) == 0 &&
			s.count(`SELECT count(*) FROM payment WHERE status = 'PENDING'`) == 0 &&
			s.count(`SELECT count(*) FROM refund WHERE status = 'PENDING'`) == 0
	})
	return answers
}

// reservedRefunds counts the refunds whose key is claimed with a PENDING
// refund reserved.
func (s *stack) reservedRefunds(refunds []refundOp) int {
	return s.count(`SELECT count(*) FROM idempotency_record WHERE idempotency_key = ANY($1) AND refund_id IS NOT NULL`, keysOf(refunds))
}

// claimed counts the ops whose key is claimed with a reserved payment.
func (s *stack) claimed(ops []op) int {
	keys := keysOf(ops)
	return s.count(`SELECT count(*) FROM idempotency_record WHERE idempotency_key = ANY($1) AND payment_id IS NOT NULL`, keys)
}

// completed counts the keys that hold a final answer.
func (s *stack) completed(keys []string) int {
	return s.count(`SELECT count(*) FROM idempotency_record WHERE idempotency_key = ANY($1) AND status = 'COMPLETED'`, keys)
}

// waitingOnLocks counts the service's statements waiting for a row lock.
func (s *stack) waitingOnLocks() int {
	return s.count(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%idempotency_record%'`)
}

// lockedRecords holds row locks on idempotency records in an open
// transaction, so that the service's phase 3 waits for them.
type lockedRecords struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (s *stack) lockRecords(ops []op) *lockedRecords {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tx, err := s.db.Begin(ctx)
	must(s.t, err)
	keys := keysOf(ops)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM idempotency_record WHERE idempotency_key = ANY($1) FOR UPDATE`, keys); err != nil {
		cancel()
		s.t.Fatal(err)
	}
	l := &lockedRecords{cancel: cancel, done: make(chan struct{})}
	go func() {
		<-ctx.Done()
		_ = tx.Rollback(context.Background())
		close(l.done)
	}()
	s.t.Cleanup(l.release) // before the pool closes: it waits for this connection
	return l
}

func (l *lockedRecords) release() {
	l.cancel()
	<-l.done
}
