package backoff

import (
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
