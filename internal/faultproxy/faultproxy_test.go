package faultproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/example/payment-service/internal/faultproxy"
)

// echoServer answers every line with "echo: <line>" and counts the lines it
// processed.
func echoServer(t *testing.T) (addr string, processed *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	processed = &atomic.Int64{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					processed.Add(1)
					if _, err := io.WriteString(c, "echo: "+line); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), processed
}

func newProxy(t *testing.T, upstream string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New("tcp", upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// roundTrip sends one line and reads one answer, within timeout.
func roundTrip(addr, line string, timeout time.Duration) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

func TestModes(t *testing.T) {
	t.Parallel()
	upstream, processed := echoServer(t)
	p := newProxy(t, upstream)

	tests := []struct {
		mode          faultproxy.Mode
		wantAnswer    bool
		wantProcessed int64 // lines the upstream saw for this request
		wantErr       func(error) bool
	}{
		{faultproxy.Pass, true, 1, nil},
		{faultproxy.Refuse, false, 0, func(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }},
		{faultproxy.Reset, false, 0, func(err error) bool { return err != nil }},
		{faultproxy.Blackhole, false, 0, func(err error) bool {
			var ne net.Error
			return errors.As(err, &ne) && ne.Timeout()
		}},
		{faultproxy.LoseResponses, false, 1, func(err error) bool { return err != nil }},
		// Processed, and the client waits until its own timeout.
		{faultproxy.HoldResponses, false, 1, func(err error) bool {
			var ne net.Error
			return errors.As(err, &ne) && ne.Timeout()
		}},
		{faultproxy.Pass, true, 1, nil}, // back to normal on the same address
	}
	for _, tc := range tests {
		if err := p.SetMode(tc.mode); err != nil {
			t.Fatal(err)
		}
		before := processed.Load()
		answer, err := roundTrip(p.Addr(), "hello", time.Second)
		if tc.wantAnswer {
			if err != nil || answer != "echo: hello\n" {
				t.Fatalf("%s: answer %q err %v, want the echo", tc.mode, answer, err)
			}
		} else if !tc.wantErr(err) {
			t.Fatalf("%s: answer %q err %v: not the failure this mode makes", tc.mode, answer, err)
		}
		// The upstream's count settles within a moment of the answer.
		deadline := time.Now().Add(time.Second)
		for processed.Load()-before != tc.wantProcessed && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if got := processed.Load() - before; got != tc.wantProcessed {
			t.Fatalf("%s: upstream processed %d lines, want %d", tc.mode, got, tc.wantProcessed)
		}
	}
}

func TestCutEndsLiveConnectionsAndDelaySlows(t *testing.T) {
	t.Parallel()
	upstream, _ := echoServer(t)
	p := newProxy(t, upstream)

	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "one\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "echo: one\n" {
		t.Fatalf("before the cut: %q %v", line, err)
	}
	p.Cut()
	_, _ = io.WriteString(c, "two\n")
	if line, err := r.ReadString('\n'); err == nil {
		t.Fatalf("after the cut the connection still answered %q", line)
	}

	p.SetDelay(200 * time.Millisecond)
	start := time.Now()
	if answer, err := roundTrip(p.Addr(), "slow", 2*time.Second); err != nil || !strings.HasPrefix(answer, "echo: slow") {
		t.Fatalf("with a delay: %q %v", answer, err)
	}
	// Two forwarded chunks (request and answer), each held 200ms: a
	// property of the proxy, not a timing assertion on the machine.
	if took := time.Since(start); took < 400*time.Millisecond {
		t.Fatalf("a delayed round trip took %s, want at least 400ms", took)
	}
}
