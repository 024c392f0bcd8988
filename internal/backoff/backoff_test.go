package backoff

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// After failures the pauses grow exponentially, up to the cap, and start
// again from the first pause after a Reset. The jitter keeps each pause
// within [d/2, d] of the planned one.
func TestBackoffDoublesUpToTheCap(t *testing.T) {
	t.Parallel()
	b := New(100*time.Millisecond, time.Second)
	want := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}
	for i, w := range want {
		w *= time.Millisecond
		if got := b.Next(); got < w/2 || got > w {
			t.Errorf("pause %d = %s, want within [%s, %s]", i+1, got, w/2, w)
		}
	}
	b.Reset()
	if got := b.Next(); got > 100*time.Millisecond {
		t.Errorf("first pause after a reset = %s, want at most 100ms", got)
	}
}

func TestJitterStaysWithinHalfToWhole(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, 1, 2, time.Second} {
		for range 100 {
			if j := Jitter(d); j < d/2 || j > d {
				t.Fatalf("Jitter(%s) = %s", d, j)
			}
		}
	}
}

// Planned is Next's schedule without its state: the n-th pause of a run.
func TestPlannedIsTheNthPauseOfARun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{
		{1, 100}, {2, 200}, {3, 400}, {4, 800}, {5, 1000}, {60, 1000},
	} {
		if got := Planned(100*time.Millisecond, time.Second, tc.n); got != tc.want*time.Millisecond {
			t.Errorf("Planned(n=%d) = %s, want %s", tc.n, got, tc.want*time.Millisecond)
		}
	}
}

// JitterFrom stays within [d/2, d] and repeats with its source's seed.
func TestJitterFromIsRepeatable(t *testing.T) {
	t.Parallel()
	a, b := rand.New(rand.NewPCG(7, 8)), rand.New(rand.NewPCG(7, 8))
	for _, d := range []time.Duration{0, 1, 2, time.Second} {
		for range 100 {
			x, y := JitterFrom(a, d), JitterFrom(b, d)
			if x != y || x < d/2 || x > d {
				t.Fatalf("JitterFrom(%s) = %s and %s", d, x, y)
			}
		}
	}
}

// Sleep pauses the whole of d while its context lives, and reports an
// ended context at once, without waiting out d.
func TestSleepEndsWithItsContext(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		d     time.Duration
		alive bool
	}{
		{"a live context", context.Background(), 20 * time.Millisecond, true},
		{"an ended context", cancelled, time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			started := time.Now()
			if got := Sleep(tc.ctx, tc.d); got != tc.alive {
				t.Fatalf("Sleep = %v, want %v", got, tc.alive)
			}
			if tc.alive && time.Since(started) < tc.d {
				t.Fatalf("Sleep returned after %s, before its %s", time.Since(started), tc.d)
			}
		})
	}
}
