package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Instruction counts (-instructions N): the service's own work per request
// in instructions, counted by valgrind's callgrind, instead of CPU time.
// On a shared machine the CPU time of one pass swings by a tenth or more
// with what else runs, so a change of a few per cent (the shared core's
// goal of "CPU per charge within 3 %", docs/benchmarks.md) cannot be seen
// in it; the number of instructions a process executes for the same
// requests barely depends on the load.
//
// Each binary runs under callgrind with its defaults, as in the passes. A
// warm-up of instructionWarmup charges and their replays fills the pools
// and the statement caches; then the counters are zeroed, N new charges
// are made one after another and the counters dumped, then the same N
// charges are replayed and the counters dumped again. The binaries take
// turns, -instruction-rounds times, so that what the machine does between
// them is seen by both.
//
// What the count leaves out: PostgreSQL's work (another process), and time
// spent waiting. What it puts in: the service's background loops (the
// outbox relay's polls, the jobs' ticks, the consumer's fetches), which
// run by the clock, a share of a per cent per request at callgrind's speed;
// the rounds show how much it moves. Go's asynchronous preemption is
// switched off under callgrind (GODEBUG=asyncpreemptoff=1), whose signal
// handling it breaks; that changes the scheduler the same way for both
// binaries.

// instructionWarmup charges and their replays precede each count.
const instructionWarmup = 100

// instructionCount is one binary's count in one round.
type instructionCount struct {
	// Binary is "service", "compare", or "stripe": the service's binary
	// charging through Stripe (-provider stripe).
	Binary string `json:"binary"`
	Round  int    `json:"round"`
	// PerCreate and PerReplay are instructions per new charge and per
	// replay.
	PerCreate float64 `json:"perCreate"`
	PerReplay float64 `json:"perReplay"`
}

// instructionCounts counts the service's (and -compare-bin's binary's, and
// with -provider stripe the service's through Stripe) instructions per
// charge and per replay.
func (b *bench) instructionCounts(ctx context.Context, serviceBin string) ([]instructionCount, error) {
	for _, tool := range []string{"valgrind", "callgrind_control"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("-instructions needs %s (Debian package valgrind)", tool)
		}
	}
	type binary struct {
		who, bin string
		stripe   bool
	}
	bins := []binary{{"service", serviceBin, false}}
	if b.o.compareBin != "" {
		bins = append(bins, binary{"compare", b.o.compareBin, false})
	}
	if b.o.stripeEnabled() {
		bins = append(bins, binary{"stripe", serviceBin, true})
	}
	defer func() { b.viaStripe = false }()
	var counts []instructionCount
	for round := 1; round <= b.o.instructionRounds; round++ {
		for _, bin := range bins {
			b.viaStripe = bin.stripe
			c, err := b.countInstructions(ctx, bin.bin, round)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", bin.who, err)
			}
			c.Binary = bin.who
			logf("round %d  %-8s %10.0f instructions per charge  %10.0f per replay", round, bin.who, c.PerCreate, c.PerReplay)
			counts = append(counts, c)
		}
	}
	return counts, nil
}

func (b *bench) countInstructions(ctx context.Context, bin string, round int) (instructionCount, error) {
	n := b.o.instructions
	dir, err := os.MkdirTemp(b.tmp, "callgrind-")
	if err != nil {
		return instructionCount{}, err
	}
	valgrind, err := exec.LookPath("valgrind")
	if err != nil {
		return instructionCount{}, err
	}
	// No PATH: stripe-go runs `uname -a` once per process, for the user
	// agent it sends Stripe, and callgrind dies of the process Go starts
	// (it knows no pidfd_open); with no uname to find, stripe-go sends
	// "unknown platform". The sandbox's service runs so too, alike.
	stop, err := b.startWrapped(ctx, bin, []string{"env", "PATH=", "GODEBUG=asyncpreemptoff=1",
		valgrind, "--tool=callgrind", "--callgrind-out-file=" + filepath.Join(dir, "out")})
	if err != nil {
		return instructionCount{}, err
	}
	defer stop()
	charge := func(count int) ([]*http.Request, error) {
		var replays []*http.Request
		for range count {
			order := b.orders.Add(1)
			if order > b.lastOrder {
				return nil, fmt.Errorf("out of orders; options.serviceOrders counts too few")
			}
			id := "instr-" + strconv.FormatInt(order, 10)
			if status, err := do(http.DefaultClient, chargeRequest(b.api, apiKey, id, b.body(order, id)).WithContext(ctx)); err != nil || status != http.StatusCreated {
				return nil, fmt.Errorf("charge %s: %d %v", id, status, err) //nolint:errorlint // err may be nil: the message shows what came back, and nothing classifies it
			}
			replays = append(replays, chargeRequest(b.api, apiKey, id, b.body(order, id)))
		}
		return replays, nil
	}
	replay := func(reqs []*http.Request) error {
		for _, req := range reqs {
			if status, err := do(http.DefaultClient, req.WithContext(ctx)); err != nil || status != http.StatusCreated {
				return fmt.Errorf("replay: %d %v", status, err) //nolint:errorlint // err may be nil: the message shows what came back, and nothing classifies it
			}
		}
		return nil
	}
	warm, err := charge(instructionWarmup)
	if err == nil {
		err = replay(warm)
	}
	if err != nil {
		return instructionCount{}, err
	}
	pid := strconv.Itoa(b.servicePID)
	control := func(arg string) error {
		out, err := exec.CommandContext(ctx, "callgrind_control", arg, pid).CombinedOutput()
		if err != nil {
			return fmt.Errorf("callgrind_control %s: %w: %s", arg, err, out)
		}
		return nil
	}
	if err := control("--zero"); err != nil {
		return instructionCount{}, err
	}
	replays, err := charge(n)
	if err != nil {
		return instructionCount{}, err
	}
	if err := control("--dump=create"); err != nil {
		return instructionCount{}, err
	}
	if err := control("--zero"); err != nil {
		return instructionCount{}, err
	}
	if err := replay(replays); err != nil {
		return instructionCount{}, err
	}
	if err := control("--dump=replay"); err != nil {
		return instructionCount{}, err
	}
	totals, err := dumpTotals(dir)
	if err != nil {
		return instructionCount{}, err
	}
	if len(totals) < 2 {
		return instructionCount{}, fmt.Errorf("callgrind wrote %d dumps to %s, not 2", len(totals), dir)
	}
	return instructionCount{Round: round, PerCreate: float64(totals[0]) / float64(n), PerReplay: float64(totals[1]) / float64(n)}, nil
}

// dumpTotals are the instruction totals of the dumps callgrind wrote to
// dir (out.1, out.2...), in the order written; the final dump at the
// process's exit, if already there, comes last.
func dumpTotals(dir string) ([]int64, error) {
	files, err := filepath.Glob(filepath.Join(dir, "out.*"))
	if err != nil {
		return nil, err
	}
	seq := func(f string) int {
		n, _ := strconv.Atoi(f[strings.LastIndex(f, ".")+1:])
		return n
	}
	sort.Slice(files, func(i, j int) bool { return seq(files[i]) < seq(files[j]) })
	var totals []int64
	for _, f := range files {
		data, err := os.ReadFile(f) //nolint:gosec // G304: callgrind's output files, named by this run
		if err != nil {
			return nil, err
		}
		total, err := callgrindTotal(string(data))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		totals = append(totals, total)
	}
	return totals, nil
}

// callgrindTotal is the "totals:" (or older "summary:") line of a callgrind
// dump: the instructions executed since the counters were last zeroed.
func callgrindTotal(dump string) (int64, error) {
	for line := range strings.Lines(dump) {
		for _, prefix := range []string{"totals:", "summary:"} {
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				fields := strings.Fields(rest)
				if len(fields) == 0 {
					continue
				}
				return strconv.ParseInt(fields[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no totals line")
}

// instructionTable is the counts' table: the median over the rounds of
// each binary, and after over before; with counts through Stripe, those
// too, and Stripe over the sandbox.
func instructionTable(counts []instructionCount, rounds int) string {
	median := func(who string, f func(instructionCount) float64) float64 {
		var v []float64
		for _, c := range counts {
			if c.Binary == who {
				v = append(v, f(c))
			}
		}
		if len(v) == 0 {
			return 0
		}
		sort.Float64s(v)
		if len(v)%2 == 0 {
			return (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
		return v[len(v)/2]
	}
	var s strings.Builder
	fmt.Fprintf(&s, "Instructions per request in the service's process (callgrind, median of %d rounds):\n\n", rounds)
	stripe := median("stripe", func(c instructionCount) float64 { return c.PerCreate }) > 0
	s.WriteString("| request | service | compare | service / compare |")
	if stripe {
		s.WriteString(" through Stripe | Stripe / sandbox |")
	}
	s.WriteString("\n|---|---|---|---|")
	if stripe {
		s.WriteString("---|---|")
	}
	s.WriteString("\n")
	for _, row := range []struct {
		name string
		f    func(instructionCount) float64
	}{{"new charge", func(c instructionCount) float64 { return c.PerCreate }}, {"replay", func(c instructionCount) float64 { return c.PerReplay }}} {
		svc, cmp := median("service", row.f), median("compare", row.f)
		ratio := "–"
		if cmp > 0 {
			ratio = fmt.Sprintf("%.3f", svc/cmp)
		}
		compare := "–"
		if cmp > 0 {
			compare = fmt.Sprintf("%.0f", cmp)
		}
		fmt.Fprintf(&s, "| %s | %.0f | %s | %s |", row.name, svc, compare, ratio)
		if stripe {
			through := median("stripe", row.f)
			fmt.Fprintf(&s, " %.0f | %.3f |", through, through/svc)
		}
		s.WriteString("\n")
	}
	return s.String()
}
