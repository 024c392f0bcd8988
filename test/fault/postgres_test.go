//go:build fault

package fault

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/example/payment-service/internal/pgtemp"
)

// PostgreSQL stopped and started in the middle of traffic, twice: a fast
// shutdown, then a crash-like immediate one (the restart replays the WAL).
// While it is down the replicas answer 503 and /readyz says not ready; they
// are never restarted, and come back on their own; every operation (charges,
// and refunds of payments made before) then ends exactly once, with no
// partial state left (no payment or refund without its claim, nothing
// IN_PROGRESS or PENDING).
func TestPostgresOutage(t *testing.T) {
	s := newStack(t, stackOptions{replicas: 3})
	c := newChecker(s)

	var (
		mu      sync.Mutex
		ops     []op
		answers []answer
		down    atomic.Bool
		// answers that came while the database was down
		whileDown = map[string]int{}
	)
	const orders = 200
	for i := range orders {
		o := op{key: fmt.Sprintf("pg-%d", i), order: int64(4000 + i), customer: 13, amount: fmt.Sprintf("%d.75", 40+i%50), ext: fmt.Sprintf("pi_pg_%d", i)}
		if i%7 == 3 {
			o.ext = fmt.Sprintf("decline_pg_%d", i)
		}
		s.addOrder(o)
		ops = append(ops, o)
	}
	// Refunds too: two of each of 20 payments charged before the outage,
	// every fifth declined by the provider.
	charges := toRefund("pg-refunded", 20, 4500, 13)
	var refunds []refundOp
	for i, p := range s.pay(charges) {
		for j := range 2 {
			r := refundOp{key: fmt.Sprintf("pg-refund-%d-%d", i, j), amount: fmt.Sprintf("%d.10", 10+j), ext: fmt.Sprintf("pi_pgr_refund_%d_%d", i, j), paid: p}
			if (2*i+j)%5 == 4 {
				r.ext = "decline_" + r.ext
			}
			refunds = append(refunds, r)
		}
	}
	// The senders' walk: the charges, with a refund after every fifth.
	var items []operation
	for i, o := range ops {
		items = append(items, o)
		if i%5 == 4 && i/5 < len(refunds) {
			items = append(items, refunds[i/5])
		}
	}

	// Four senders walk through the operations, one attempt each, while the
	// database goes away and comes back.
	var next atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := int(next.Add(1)-1) % len(items)
				a := s.replicas[(i+w)%3].send(items[i].call(), 3*time.Second)
				mu.Lock()
				answers = append(answers, a)
				if down.Load() {
					whileDown[fmt.Sprintf("%d %s", a.status, a.code)]++
				}
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	for _, mode := range []pgtemp.HaltMode{pgtemp.HaltFast, pgtemp.HaltImmediate} {
		time.Sleep(700 * time.Millisecond)
		must(t, s.haltDB(mode))
		down.Store(true)
		time.Sleep(300 * time.Millisecond)
		waitFor(t, 5*time.Second, "every replica not ready", func() bool {
			for _, r := range s.replicas {
				if r.ready() {
					return false
				}
			}
			return true
		})
		time.Sleep(500 * time.Millisecond)
		down.Store(false)
		must(t, s.resumeDB(t.Context()))
		waitFor(t, 15*time.Second, "every replica ready again on its own", func() bool {
			for _, r := range s.replicas {
				if !r.ready() {
					return false
				}
			}
			return true
		})
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()

	t.Logf("answers while the database was down: %v", whileDown)
	if whileDown["503 service-unavailable"] == 0 {
		t.Fatalf("no 503 service-unavailable while the database was down (%v): the outage was not met", whileDown)
	}
	for _, r := range s.replicas {
		if r.starts != 1 {
			t.Fatalf("replica %s was started %d times; it must recover by itself", r.name, r.starts)
		}
	}
	for _, o := range items {
		answers = append(answers, s.settle(o, 20*time.Second)...)
	}
	require(t, c.check(append(ops, charges...), answers), "after two outages")
	require(t, c.checkRefunds(refunds, answers), "after two outages")
	require(t, c.checkGlobal(), "after two outages")
}
