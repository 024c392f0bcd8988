package main

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestProcessCPUCountsTheWorkDone(t *testing.T) {
	before, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Burn 200 ms of CPU as getrusage counts it, a clock of its own, not
	// /proc's: a loop of 200 ms of wall time got a fraction of that on a
	// loaded machine. /proc counts in 10 ms ticks.
	ruBefore := rusageCPU(t)
	var x uint64
	for deadline := time.Now().Add(30 * time.Second); rusageCPU(t)-ruBefore < 200*time.Millisecond && time.Now().Before(deadline); {
		for i := range 10_000 {
			x += uint64(i) * x
		}
	}
	after, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if got := after - before; got < 100*time.Millisecond || got > 5*time.Second {
		t.Errorf("200 ms of work counted as %v of CPU (x=%d)", got, x)
	}
	if _, err := processCPU(-1); err == nil {
		t.Error("no error for a process that does not exist")
	}
}

// rusageCPU is this process's user and system time, from getrusage.
func rusageCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestSummarizeTakesMediansAndRatios(t *testing.T) {
	res := func(perSecond float64, cpu time.Duration) result {
		return result{PerSecond: perSecond, CPUPerRequest: cpu}
	}
	o := options{passes: 3, createC: []int{1}, replayC: []int{16}}
	for _, tc := range []struct {
		name        string
		runs        map[string][]result
		wantRatio   float64
		wantCompare float64 // 0: no compare columns
		wantCPU     time.Duration
	}{
		{
			name: "service and ceiling",
			runs: map[string][]result{
				"service create C=1": {res(300, 900*time.Microsecond), res(100, time.Millisecond), res(200, 800*time.Microsecond)},
				"pgbench create C=1": {res(400, 0), res(500, 0), res(100, 0)},
			},
			wantRatio: 0.5, wantCPU: 900 * time.Microsecond,
		},
		{
			name: "with a compared binary",
			runs: map[string][]result{
				"service create C=1": {res(200, time.Millisecond)},
				"compare create C=1": {res(300, 700*time.Microsecond)},
				"pgbench create C=1": {res(400, 0)},
			},
			wantRatio: 0.5, wantCompare: 0.75, wantCPU: time.Millisecond,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := summarize(o, tc.runs)
			r := tab.Rows[0]
			if r.Ratio != tc.wantRatio || r.CompareRatio != tc.wantCompare || r.Service.CPUPerRequest != tc.wantCPU {
				t.Errorf("ratio %v, compare ratio %v, CPU %v; want %v, %v, %v",
					r.Ratio, r.CompareRatio, r.Service.CPUPerRequest, tc.wantRatio, tc.wantCompare, tc.wantCPU)
			}
			text := tab.String()
			if got := strings.Contains(text, "compare req/s"); got != (tc.wantCompare != 0) {
				t.Errorf("compare columns shown: %v, want %v:\n%s", got, tc.wantCompare != 0, text)
			}
			// A row with no ceiling (replay here) still has every column.
			for _, line := range strings.Split(strings.TrimSpace(text), "\n")[2:] {
				if strings.Count(line, "|") != strings.Count(strings.Split(text, "\n")[2], "|") {
					t.Errorf("row %q has another number of columns than the header", line)
				}
			}
		})
	}
}
