package outbox

import (
	"testing"
	"time"
)

// After failed publishes the relay pauses exponentially longer, up to the
// cap, and starts again from the first pause once a batch goes through. The
// jitter keeps each pause within [d/2, d] of the planned one.
func TestRelayBackoffDoublesUpToTheCap(t *testing.T) {
	t.Parallel()
	b := newBackoff(100*time.Millisecond, time.Second)
	want := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}
	for i, w := range want {
		w *= time.Millisecond
		if got := b.next(); got < w/2 || got > w {
			t.Errorf("pause %d = %s, want within [%s, %s]", i+1, got, w/2, w)
		}
	}
	b.reset()
	if got := b.next(); got > 100*time.Millisecond {
		t.Errorf("first pause after a reset = %s, want at most 100ms", got)
	}
}
