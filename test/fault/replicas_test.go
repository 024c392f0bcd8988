//go:build fault

package fault

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/example/payment-service/internal/sandboxprovider"
)

// Three replicas, 360 concurrent requests over 36 operations: every
// operation's duplicates land on different replicas at the same time. Each
// operation is charged once at the provider and has one payment and one
// event; every answer is the stored outcome or a retryable 409/503.
func TestConcurrentDuplicatesAcrossReplicas(t *testing.T) {
	// A provider that takes 30 ms per charge keeps claims open long enough
	// for duplicates to meet them.
	s := newStack(t, stackOptions{replicas: 3, provider: sandboxprovider.Config{Latency: 30 * time.Millisecond}})
	c := newChecker(s)
	rng := rand.New(rand.NewPCG(1, 2))

	const ops, perOp = 36, 10
	var all []op
	for i := range ops {
		o := op{key: fmt.Sprintf("dup-%d", i), order: int64(1000 + i), customer: 7, amount: fmt.Sprintf("%d.%02d", 10+i, i), ext: fmt.Sprintf("pi_dup_%d", i)}
		if i%6 == 5 {
			o.ext = fmt.Sprintf("decline_dup_%d", i)
		}
		s.addOrder(o)
		all = append(all, o)
	}
	type send struct {
		o op
		r *replica
	}
	var sends []send
	for _, o := range all {
		for range perOp {
			sends = append(sends, send{o, s.replicas[rng.IntN(len(s.replicas))]})
		}
	}
	rng.Shuffle(len(sends), func(i, j int) { sends[i], sends[j] = sends[j], sends[i] })

	answers := make([]answer, len(sends))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, sd := range sends {
		wg.Go(func() {
			<-start
			answers[i] = sd.r.charge(sd.o, 10*time.Second)
		})
	}
	close(start)
	wg.Wait()

	counts := map[string]int{}
	for _, a := range answers {
		switch {
		case a.err != nil:
			counts["no answer"]++
		case a.replayed:
			counts["replayed"]++
		default:
			counts[fmt.Sprintf("%d %s", a.status, a.code)]++
		}
	}
	t.Logf("answers to %d concurrent requests: %v", len(answers), counts)
	// The test must have made duplicates meet: turned away while the first
	// was running, or answered its stored outcome (how many of each depends
	// on the machine's speed).
	if counts["409 request-in-progress"]+counts["replayed"] == 0 {
		t.Fatalf("no duplicate met a running or finished charge (%v): the test did not test", counts)
	}
	if counts["no answer"] > 0 {
		t.Fatalf("%d requests got no answer with no fault injected", counts["no answer"])
	}

	for _, o := range all {
		answers = append(answers, s.settle(o, 20*time.Second)...)
	}
	require(t, c.check(all, answers), "after the burst")
	require(t, c.checkGlobal(), "after the burst")
	if got := s.provider.Counters().Charges; got != ops-ops/6 {
		t.Fatalf("the provider made %d charges, want %d", got, ops-ops/6)
	}
	for _, a := range answers {
		if a.final() && a.status != http.StatusCreated && a.status != http.StatusPaymentRequired {
			t.Fatalf("a duplicate with the same key got %s", a)
		}
	}
}
