package main

import (
	"os"
	"os/exec"
	"slices"
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

func TestClusterCPUCountsChildrenThatExited(t *testing.T) {
	before, err := clusterCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// A child of this process, as a backend is the postmaster's, that
	// burns CPU and exits before the second reading: its time is in this
	// process's cutime and cstime by then.
	child := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	used := child.ProcessState.UserTime() + child.ProcessState.SystemTime()
	after, err := clusterCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// /proc counts in 10 ms ticks; this process's own work in between
	// only adds.
	if got := after - before; got < used-20*time.Millisecond {
		t.Errorf("a child that used %v counted as %v", used, got)
	}
	if _, err := clusterCPU(-1); err == nil {
		t.Error("no error for a postmaster that does not exist")
	}
}

func TestColdStartRatios(t *testing.T) {
	part := func(requests int, cpu time.Duration) result {
		return result{Requests: requests, Duration: 5 * time.Second, PerSecond: float64(requests) / 5, CPUPerRequest: cpu, DBCPUPerRequest: 2 * cpu,
			HotRowsPerRequest: float64(requests) / 200}
	}
	for _, tc := range []struct {
		name           string
		cs             coldStart
		whole, slowest float64
		cpu, dbCPU     time.Duration // of the cold parts
		rows           float64       // read per request in the cold parts
	}{
		{
			name: "slow first minute",
			cs: coldStart{
				Parts:  []result{part(1000, 900*time.Microsecond), part(2000, 800*time.Microsecond), part(3000, 700*time.Microsecond)},
				Steady: []result{part(4000, 700*time.Microsecond), part(4000, 700*time.Microsecond)},
			},
			// 6,000 requests in 15 s against 8,000 in 10 s; the CPU is
			// weighted by each part's requests.
			whole: 0.5, slowest: 0.25,
			cpu:   (1000*900 + 2000*800 + 3000*700) * time.Microsecond / 6000,
			dbCPU: (1000*1800 + 2000*1600 + 3000*1400) * time.Microsecond / 6000,
			rows:  (1000*5 + 2000*10 + 3000*15) / 6000.0,
		},
		{
			name:  "no steady part",
			cs:    coldStart{Parts: []result{part(1000, time.Millisecond)}},
			whole: 0, slowest: 0, cpu: time.Millisecond, dbCPU: 2 * time.Millisecond, rows: 5,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			whole, slowest := tc.cs.ratios()
			cold := total(tc.cs.Parts)
			if whole != tc.whole || slowest != tc.slowest || cold.CPUPerRequest != tc.cpu || cold.DBCPUPerRequest != tc.dbCPU ||
				cold.HotRowsPerRequest != tc.rows {
				t.Errorf("ratio %v, slowest %v, CPU %v, db CPU %v, rows %v; want %v, %v, %v, %v, %v",
					whole, slowest, cold.CPUPerRequest, cold.DBCPUPerRequest, cold.HotRowsPerRequest,
					tc.whole, tc.slowest, tc.cpu, tc.dbCPU, tc.rows)
			}
			if text := coldStartTable([]coldStart{tc.cs}); !strings.Contains(text, "| binary |") {
				t.Errorf("no table:\n%s", text)
			}
		})
	}
}

func TestPartsCountsWholeParts(t *testing.T) {
	for _, tc := range []struct {
		d, part time.Duration
		want    int
	}{
		{time.Minute, 5 * time.Second, 12},
		{62 * time.Second, 5 * time.Second, 12},
		{time.Second, 5 * time.Second, 1},
	} {
		if got := parts(tc.d, tc.part); got != tc.want {
			t.Errorf("parts(%v, %v) = %d, want %d", tc.d, tc.part, got, tc.want)
		}
	}
}

func TestCallgrindTotalReadsTheDumpsTotal(t *testing.T) {
	for _, tc := range []struct {
		name, dump string
		want       int64
		wantErr    bool
	}{
		{"totals line", "version: 1\nevents: Ir\nfn=(1) main\n16 3\ntotals: 918065\n", 918065, false},
		{"older summary line", "events: Ir\nsummary: 42\n", 42, false},
		{"several events, Ir first", "events: Ir Dr\ntotals: 7 9\n", 7, false},
		{"no total", "events: Ir\nfn=(1) main\n16 3\n", 0, true},
		{"not a number", "totals: many\n", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := callgrindTotal(tc.dump)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("callgrindTotal = %d, %v; want %d, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestInstructionTableTakesMediansAndTheRatio(t *testing.T) {
	counts := []instructionCount{
		{Binary: "service", Round: 1, PerCreate: 900, PerReplay: 200},
		{Binary: "compare", Round: 1, PerCreate: 1000, PerReplay: 250},
		{Binary: "service", Round: 2, PerCreate: 1100, PerReplay: 220},
		{Binary: "compare", Round: 2, PerCreate: 1000, PerReplay: 250},
	}
	got := instructionTable(counts, 2)
	for _, want := range []string{"| new charge | 1000 | 1000 | 1.000 |", "| replay | 210 | 250 | 0.840 |"} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	if alone := instructionTable(counts[:1], 1); !strings.Contains(alone, "| new charge | 900 | – | – |") {
		t.Errorf("a table without -compare-bin:\n%s", alone)
	}
	through := append(counts[:1:1], instructionCount{Binary: "stripe", Round: 1, PerCreate: 990, PerReplay: 200})
	if got := instructionTable(through, 1); !strings.Contains(got, "| new charge | 900 | – | – | 990 | 1.100 |") || !strings.Contains(got, "| replay | 200 | – | – | 200 | 1.000 |") {
		t.Errorf("a table with -provider stripe:\n%s", got)
	}
}

func TestTableWithoutACeilingHasNoRatios(t *testing.T) {
	runs := map[string][]result{
		name("service", "create", 1): {{PerSecond: 240, CPUPerRequest: 1600 * time.Microsecond}},
		name("compare", "create", 1): {{PerSecond: 250, CPUPerRequest: 1500 * time.Microsecond}},
	}
	got := summarize(options{passes: 1, createC: []int{1}}, runs).String()
	if want := "| create | 1 | 240 | 0.00 | 0.00 | 1600 | – | – | – | – | 250 | 1500 | – |"; !strings.Contains(got, want) {
		t.Errorf("table lacks %q:\n%s", want, got)
	}
}

// The provider table sets Stripe's CPU per request beside the sandbox's of
// the same passes: their medians, and the median of the per-pass ratios.
func TestProviderTableTakesMediansAndPerPassRatios(t *testing.T) {
	runs := map[string][]result{
		name("service", "create", 16): {{PerSecond: 900, CPUPerRequest: 1000 * time.Microsecond}, {PerSecond: 950, CPUPerRequest: 1100 * time.Microsecond}, {PerSecond: 1000, CPUPerRequest: 900 * time.Microsecond}},
		name("stripe", "create", 16):  {{PerSecond: 800, CPUPerRequest: 1050 * time.Microsecond}, {PerSecond: 850, CPUPerRequest: 1210 * time.Microsecond}, {PerSecond: 810, CPUPerRequest: 1080 * time.Microsecond}},
		name("service", "replay", 16): {{PerSecond: 5000, CPUPerRequest: 200 * time.Microsecond}},
		name("stripe", "replay", 16):  {{PerSecond: 5000, CPUPerRequest: 200 * time.Microsecond}},
	}
	got := providerTable(options{passes: 3, createC: []int{16}, replayC: []int{16}, providerLatency: 10 * time.Millisecond}, runs)
	for _, want := range []string{
		"| create | 16 | 950 | 1000 | 810 | 1080 | 1.10 (1.05, 1.10, 1.20) |",
		"| replay | 16 | 5000 | 200 | 5000 | 200 | 1.00 (1.00) |",
		"both answering after 10ms",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
}

func TestPrefillAndPurgeRateLists(t *testing.T) {
	for _, tc := range []struct {
		prefill, rates string
		wantSizes      []int64
		wantRates      []int
		wantErr        bool
	}{
		{"", "", nil, nil, false},
		{"3000000, 1000000", "0,10000", []int64{1000000, 3000000}, []int{0, 10000}, false},
		{"0", "", nil, nil, true},
		{"", "-1", nil, nil, true},
		{"1e6", "", nil, nil, true},
	} {
		sizes, err1 := sizeList(tc.prefill)
		rates, err2 := rateList(tc.rates)
		if gotErr := err1 != nil || err2 != nil; gotErr != tc.wantErr {
			t.Errorf("%q, %q: errors %v, %v; want an error: %v", tc.prefill, tc.rates, err1, err2, tc.wantErr)
			continue
		}
		if !tc.wantErr && (!slices.Equal(sizes, tc.wantSizes) || !slices.Equal(rates, tc.wantRates)) {
			t.Errorf("%q, %q = %v, %v; want %v, %v", tc.prefill, tc.rates, sizes, rates, tc.wantSizes, tc.wantRates)
		}
	}
}
