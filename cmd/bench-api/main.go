// Command bench-api measures POST /payments at the database's speed, as
// `make bench-api` runs it on a fresh machine:
//
//  1. a throwaway PostgreSQL (internal/pgtemp, fsync on) with
//     pg_stat_statements, migrated, with orders to charge;
//  2. the sandbox payment provider on loopback (no latency), and the real
//     payment-service binary with its default settings, logging included
//     (to a file);
//  3. for each pass: new charges and replays at each concurrency, from a
//     closed-loop load generator in this process; then pgbench on the same
//     cluster running the service's own statements (the scripts next to the
//     SQL in internal/repository/pgbench, which a test keeps in step);
//  4. one table of medians over the passes: requests/s, p50, p99 and the
//     ratio to the pgbench ceiling; and a JSON file for the chart
//     (scripts/bench-chart).
//
// The machine is shared and noisy, so ratios measured in the same run are
// what the docs report; the passes alternate service and pgbench so both
// see the same noise.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/example/payment-service/db/migrations"
	"github.com/example/payment-service/internal/pgtemp"
	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/stripefake"
)

const (
	apiKey = "bench-secret"
	// pgbenchOrders are charged by pgbench, the service's (options.
	// serviceOrders) before them: each charge needs an order of its own
	// (one paid order is paid once).
	pgbenchOrders = 2_000_000
	// maxChargesPerSecond bounds how fast the service could charge here,
	// several times what it does: each run of new charges gets that many
	// orders per second of the run, per load generator thread.
	maxChargesPerSecond = 10_000
	maxLoadThreads      = 2
	// replayKeys are charged once before the replays, then replayed; their
	// idempotency keys are numbers from firstReplayKey.
	replayKeys     = 1000
	firstReplayKey = 900_000_001
)

type options struct {
	duration, warmup time.Duration
	passes           int
	createC, replayC []int
	out              string
	cpuProfile       string
	profileRun       string
	ceiling          bool
	loadgen          string // "wrk" or "go"
	serviceBin       string // a prebuilt binary; empty: build ./cmd/payment-service
	compareBin       string // another binary measured in the same passes; empty: none
	// The cold start (coldstart.go): new charges at coldC for coldStart
	// from the service's start, then for coldSteady after ANALYZE, in
	// parts of coldPart; coldStart 0: none.
	coldStart, coldSteady, coldPart time.Duration
	coldC                           int
	// instructions is how many charges (and replays) each binary makes
	// under callgrind for the instruction counts (instructions.go); 0:
	// none.
	instructions, instructionRounds int
	// scale runs the cost-as-the-tables-grow measurement (scale.go)
	// instead of the passes: at scaleC clients, against the schema before
	// the newest migration, the newest empty and, for each size in
	// prefill, the newest with that many rows per table; then purgeCycles
	// cycles of purgeRows expired rows per table purged under load on the
	// largest, each cycle's purge paced at the next of purgeRates (rows a
	// second, CLEANUP_ROWS_PER_SECOND; none: the service's default).
	scale               bool
	scaleC, purgeCycles int
	prefill             []int64
	purgeRows           int64
	purgeRates          []int
	// saga also measures charge steps over the saga transport (saga.go)
	// at each create concurrency, in the same passes; sagaWorkers is the
	// service's SAGA_WORKERS (0: its default).
	saga        bool
	sagaWorkers int
	// statements measures the hot path's statements (statements.go)
	// after the passes: a create run and a replay run at statementsC,
	// each against freshly reset statistics.
	statements  bool
	statementsC int
	// serviceEnv are more settings for the service, NAME=value.
	serviceEnv []string
	// provider "stripe" also runs each pass's create and replay runs with
	// the service charging through Stripe, the stateful fake in its place
	// (stripe.go); providerLatency is how long both providers take to
	// answer a charge.
	provider        string
	providerLatency time.Duration
}

func main() {
	var o options
	var createC, replayC, prefill, purgeRates string
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "measured time of each run")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured time before each run")
	flag.IntVar(&o.passes, "passes", 3, "alternating passes of service and pgbench runs; the table shows medians (0: the cold start only)")
	flag.StringVar(&createC, "create", "1,16,64", "concurrencies of new charges")
	flag.StringVar(&replayC, "replay", "1,16,64", "concurrencies of replays")
	flag.StringVar(&o.out, "out", "bench-api.json", "results as JSON, for scripts/bench-chart")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the service during the first pass's run named by -profile (with -provider stripe, that run through Stripe too, to the file's name and .stripe)")
	flag.StringVar(&o.profileRun, "profile", "create 64", `the run -cpuprofile profiles: "create C", "replay C" or (with -saga) "saga C"`)
	flag.BoolVar(&o.ceiling, "ceiling", true, "run pgbench for the ceilings")
	flag.StringVar(&o.serviceBin, "service-bin", "", "run this payment-service binary instead of building ./cmd/payment-service (to measure another version against the same ceiling)")
	flag.StringVar(&o.compareBin, "compare-bin", "", "also run this payment-service binary in every pass, right after the service, against the same ceiling: a before-and-after in one run, which the machine's noise cannot tell apart from a change")
	flag.DurationVar(&o.coldStart, "cold-start", time.Minute, "measure each binary's first minute on a freshly migrated, analyzed, empty database for this long (0: not at all)")
	flag.DurationVar(&o.coldSteady, "cold-steady", 15*time.Second, "after the cold start, ANALYZE and measure the steady state for this long")
	flag.DurationVar(&o.coldPart, "cold-part", 5*time.Second, "the cold start's parts, each measured on its own")
	flag.IntVar(&o.coldC, "cold-c", 64, "concurrency of the cold start's new charges")
	flag.IntVar(&o.instructions, "instructions", 0, "also count the instructions each binary executes per charge and per replay under valgrind's callgrind, over this many of each, which the machine's load barely moves (0: not at all)")
	flag.IntVar(&o.instructionRounds, "instruction-rounds", 3, "turns each binary takes at the instruction counts; the table shows medians")
	flag.BoolVar(&o.scale, "scale", false, "measure the cost of a charge as the tables grow instead of the passes: the schema before the newest migration against the newest, empty and -prefill'ed, and the purge under load (docs/benchmarks.md)")
	flag.IntVar(&o.scaleC, "scale-c", 16, "concurrency of -scale's runs")
	flag.StringVar(&prefill, "prefill", "", "with -scale, also a database per size in this comma-separated list (e.g. 1000000,3000000) whose idempotency_record, payment, outbox_event and processed_event hold that many rows each (empty: none)")
	flag.IntVar(&o.purgeCycles, "purge-cycles", 0, "with -scale, cycles of fill and purge under load on the last database (0: none)")
	flag.Int64Var(&o.purgeRows, "purge-rows", 0, "expired rows per table that each purge cycle adds and purges (0: as many as the largest -prefill, or 100000)")
	flag.StringVar(&purgeRates, "purge-rates", "", "the purge's pace in the cycles, rows a second (CLEANUP_ROWS_PER_SECOND), one per cycle in turn, e.g. 0,10000 alternates an unpaced and a paced purge (empty: the service's default)")
	flag.StringVar(&o.loadgen, "loadgen", "", `the load generator: "wrk" (the default when it is installed) or "go" (this program's own)`)
	flag.BoolVar(&o.saga, "saga", false, "also measure charges as saga steps (ChargeOrder.v1 on the commands topic, timed until the reply is on the replies topic) at each -create concurrency, beside the HTTP creates, on an in-process broker (KAFKA_BROKERS: that cluster instead)")
	flag.IntVar(&o.sagaWorkers, "saga-workers", 0, "with -saga, the service's SAGA_WORKERS (0: its default)")
	flag.BoolVar(&o.statements, "statements", false, "after the passes, measure the service's statements per request with pg_stat_statements (track_planning on) and the tables' HOT updates, over one create and one replay run")
	flag.IntVar(&o.statementsC, "statements-c", 16, "concurrency of -statements' runs")
	flag.StringVar(&o.provider, "provider", "", `"stripe": also run each pass's create and replay runs with the service charging through Stripe (the stateful fake on loopback), right after the sandbox's, and print the service's CPU per request through each and their ratio`)
	flag.DurationVar(&o.providerLatency, "provider-latency", 0, "how long the sandbox and (with -provider stripe) the Stripe fake take to answer a new charge")
	var serviceEnv string
	flag.StringVar(&serviceEnv, "service-env", "", "more settings for the service, comma-separated NAME=value (e.g. KAFKA_CONSUMER_BATCH_WAIT=1ms)")
	flag.Parse()
	for kv := range strings.SplitSeq(serviceEnv, ",") {
		if kv = strings.TrimSpace(kv); kv != "" {
			o.serviceEnv = append(o.serviceEnv, kv)
		}
	}
	var err error
	if o.createC, err = ints(createC); err == nil {
		o.replayC, err = ints(replayC)
	}
	if err == nil {
		o.prefill, err = sizeList(prefill)
	}
	if err == nil {
		o.purgeRates, err = rateList(purgeRates)
	}
	if err == nil && o.coldStart > 0 && (o.coldPart < time.Second || o.coldStart < o.coldPart || o.coldSteady < o.coldPart) {
		err = fmt.Errorf("-cold-part must be at least 1s and at most -cold-start and -cold-steady")
	}
	if err == nil && o.provider != "" && o.provider != "stripe" {
		err = fmt.Errorf("-provider must be stripe (or empty: the sandbox alone), got %q", o.provider)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-api:", err)
		os.Exit(2)
	}
	if o.purgeRows == 0 {
		o.purgeRows = 100_000
		if len(o.prefill) > 0 {
			o.purgeRows = slices.Max(o.prefill)
		}
	}
	if o.loadgen == "" {
		o.loadgen = "go"
		if _, err := exec.LookPath("wrk"); err == nil {
			o.loadgen = "wrk"
		}
	}
	if o.loadgen != "wrk" && o.loadgen != "go" {
		fmt.Fprintln(os.Stderr, "bench-api: -loadgen must be wrk or go")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench-api:", err)
		os.Exit(1)
	}
}

// serviceOrders is how many orders the service's runs need: the replay
// keys' and a slice for each run of new charges, on each binary.
func (o options) serviceOrders() int64 {
	binaries, replaySets := 1, 1
	if o.compareBin != "" {
		binaries = 2
	}
	if o.stripeEnabled() {
		replaySets = 2
	}
	runs := o.passes * (binaries + replaySets - 1) * len(o.createC)
	if o.saga {
		runs *= 2
	}
	if o.statements {
		runs++
	}
	return int64(replaySets*replayKeys) + 1 + int64(runs)*maxLoadThreads*ordersPerThread(o.warmup+o.duration) +
		int64(o.instructionRounds*(binaries+replaySets-1)*(instructionWarmup+o.instructions))
}

// ordersPerThread is one load generator thread's slice of orders for a run
// of d, warmup included.
func ordersPerThread(d time.Duration) int64 {
	return int64(maxChargesPerSecond * d.Seconds())
}

func ints(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad concurrency list %q", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// sizeList reads -prefill: row counts, each at least 1, smallest first;
// empty is none.
func sizeList(s string) ([]int64, error) {
	out, err := numberList(s, "-prefill size", 1)
	slices.Sort(out)
	return out, err
}

// rateList reads -purge-rates: rows a second, 0 (unpaced) or more.
func rateList(s string) ([]int, error) {
	out, err := numberList(s, "-purge-rates rate", 0)
	ints := make([]int, len(out))
	for i, n := range out {
		ints[i] = int(n)
	}
	return ints, err
}

// numberList reads a comma-separated list of integers of at least least.
func numberList(s, what string, least int64) ([]int64, error) {
	var out []int64
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < least {
			return nil, fmt.Errorf("bad %s %q", what, f)
		}
		out = append(out, n)
	}
	return out, nil
}

// bench is the running stack.
type bench struct {
	o      options
	dsn    string // TCP, for the service and pgbench
	api    string
	debug  string
	bindir string
	// pgbenchBin runs the ceilings; empty with -ceiling=false.
	pgbenchBin string
	tmp        string
	orders     atomic.Int64 // next order the service charges
	// lastOrder is the last of the service's orders (options.serviceOrders):
	// the ones after it are pgbench's.
	lastOrder int64
	provider  *sandboxprovider.Server
	// fake is the Stripe fake of -provider stripe; viaStripe says that the
	// running service charges through it (else through the sandbox), and
	// stripeReplayOrder is the order of its first replay key (stripe.go).
	fake              *stripefake.Server
	viaStripe         bool
	stripeReplayOrder int64
	// servicePID is the running service's process, for its CPU time;
	// postmasterPID the cluster's, for the database's.
	servicePID, postmasterPID int
	// saga is the broker of -saga; env the service's extra settings.
	saga *sagaBroker
	env  []string
}

func run(ctx context.Context, o options) error {
	tmp, err := os.MkdirTemp("", "bench-api-")
	if err != nil {
		return err
	}
	if os.Getenv("BENCH_KEEP") == "" {
		defer os.RemoveAll(tmp)
	} else {
		logf("keeping %s", tmp)
	}
	b := &bench{o: o, tmp: tmp}
	if b.bindir, err = pgtemp.BinDir(); err != nil {
		return err
	}
	if o.ceiling {
		if b.pgbenchBin, err = pgbenchBinary(b.bindir); err != nil {
			return err
		}
	}

	pgPort, err := freePort()
	if err != nil {
		return err
	}
	logf("load generator: %s; starting PostgreSQL (fsync on) on 127.0.0.1:%d", o.loadgen, pgPort)
	settings := map[string]string{"shared_preload_libraries": "pg_stat_statements"}
	if o.statements {
		settings["pg_stat_statements.track_planning"] = "on"
	}
	cluster, err := pgtemp.Start(ctx, pgtemp.Options{TCPPort: pgPort, Settings: settings})
	if err != nil {
		return err
	}
	defer cluster.Stop()
	b.dsn = cluster.DSN("postgres")
	if b.postmasterPID, err = postmasterPID(cluster.Dir()); err != nil {
		return err
	}

	if b.provider, err = sandboxprovider.Start("127.0.0.1:0", sandboxprovider.Config{Latency: o.providerLatency}); err != nil {
		return err
	}
	defer func() { _ = b.provider.Close() }() // after the run: its results are in already
	if o.stripeEnabled() {
		if b.fake, err = stripefake.Start("127.0.0.1:0", stripefake.Config{SecretKey: benchStripeKey, Latency: o.providerLatency}); err != nil {
			return err
		}
		defer func() { _ = b.fake.Close() }()
	}
	serviceBin := o.serviceBin
	if serviceBin == "" {
		serviceBin = filepath.Join(b.tmp, "payment-service")
		build := exec.CommandContext(ctx, "go", "build", "-o", serviceBin, "./cmd/payment-service")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build the service: %w", err)
		}
	}
	if o.scale {
		rep, err := b.scale(ctx, cluster, serviceBin)
		if err != nil {
			return err
		}
		fmt.Println()
		fmt.Println(rep.String())
		return writeJSON(o.out, table{Passes: o.passes, Duration: o.duration, LoadGenerator: o.loadgen, Scale: rep})
	}
	if o.saga {
		if b.saga, err = startSagaBroker(ctx); err != nil {
			return err
		}
		defer b.saga.close()
		b.env = append(b.env, b.saga.env...)
		if o.sagaWorkers > 0 {
			b.env = append(b.env, "SAGA_WORKERS="+strconv.Itoa(o.sagaWorkers))
		}
	}
	var cold []coldStart
	if o.coldStart > 0 {
		if cold, err = b.coldStarts(ctx, cluster, serviceBin); err != nil {
			return err
		}
	}
	var tab table
	if o.passes > 0 || o.instructions > 0 {
		if err := b.seed(ctx); err != nil {
			return err
		}
	}
	if o.passes > 0 {
		runs, err := b.passes(ctx, serviceBin)
		if err != nil {
			return err
		}
		tab = summarize(o, runs)
		fmt.Println()
		fmt.Println(tab.String())
		if o.saga {
			fmt.Println(sagaTable(o, runs))
		}
		if o.stripeEnabled() {
			fmt.Println(providerTable(o, runs))
		}
		if err := b.printServerTime(ctx); err != nil {
			return err
		}
	}
	if o.instructions > 0 {
		if tab.Instructions, err = b.instructionCounts(ctx, serviceBin); err != nil {
			return err
		}
		fmt.Println()
		fmt.Println(instructionTable(tab.Instructions, o.instructionRounds))
	}
	if len(cold) > 0 {
		tab.ColdStart = cold
		fmt.Println()
		fmt.Println(coldStartTable(cold))
	}
	return writeJSON(o.out, tab)
}

func writeJSON(file string, tab table) error {
	out, err := json.MarshalIndent(tab, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(out, '\n'), 0o644)
}

// seed migrates the bench database and fills it with the orders that the
// service's runs and pgbench charge.
func (b *bench) seed(ctx context.Context) error {
	o := b.o
	if err := migrations.Up(ctx, b.dsn); err != nil {
		return err
	}
	b.lastOrder = o.serviceOrders()
	logf("seeding %d orders", b.lastOrder+pgbenchOrders)
	if err := exec1(ctx, b.dsn, `INSERT INTO order_projection (order_id, customer_id, amount, currency)
		SELECT g, 42, 10.00, 'RUB' FROM generate_series(1, $1::bigint) g`, b.lastOrder+pgbenchOrders); err != nil {
		return err
	}
	if err := exec1(ctx, b.dsn, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return err
	}
	// pgbench's charges take their orders from this sequence, one each.
	return exec1(ctx, b.dsn, fmt.Sprintf(`CREATE SEQUENCE pgbench_order START %d MAXVALUE %d`,
		b.lastOrder+1, b.lastOrder+pgbenchOrders))
}

// passes measures the service (and -compare-bin's binary) and pgbench in
// o.passes alternating passes, on the seeded database.
func (b *bench) passes(ctx context.Context, serviceBin string) (map[string][]result, error) {
	o := b.o

	stopService, err := b.startService(ctx, serviceBin)
	if err != nil {
		return nil, err
	}
	defer func() { stopService() }()
	if err := b.chargeReplayKeys(ctx); err != nil {
		return nil, err
	}
	if b.saga != nil {
		if err := b.awaitSaga(ctx); err != nil {
			return nil, err
		}
	}

	runs := map[string][]result{}
	for pass := 1; pass <= o.passes; pass++ {
		profiled := func(workload string, c int) bool {
			return pass == 1 && o.cpuProfile != "" && o.profileRun == fmt.Sprintf("%s %d", workload, c)
		}
		measure := func(who string, profile bool) error {
			for _, w := range []struct {
				workload string
				cs       []int
			}{{"create", o.createC}, {"replay", o.replayC}} {
				for _, c := range w.cs {
					r, err := b.serviceRun(ctx, w.workload, c, profile && profiled(w.workload, c))
					if err != nil {
						return err
					}
					runs[name(who, w.workload, c)] = append(runs[name(who, w.workload, c)], r)
					report(pass, name(who, w.workload, c), r)
					if w.workload == "create" && b.saga != nil {
						// The same concurrency as saga steps, right after.
						var profiledRun chan error
						if profile && profiled("saga", c) {
							profiledRun = make(chan error, 1)
							go func() { profiledRun <- b.cpuProfile(ctx) }()
						}
						r := b.sagaLoad(ctx, c, o.warmup, o.duration)
						if profiledRun != nil {
							if err := <-profiledRun; err != nil {
								return err
							}
						}
						runs[name(who, "saga", c)] = append(runs[name(who, "saga", c)], r)
						report(pass, name(who, "saga", c), r)
					}
				}
			}
			return nil
		}
		if err := measure("service", true); err != nil {
			return nil, err
		}
		// The same workloads on the other binary, or through the other
		// provider, then back, so that the next pass starts as this one did.
		restart := func(bin string) (err error) {
			stopService()
			if stopService, err = b.startService(ctx, bin); err != nil || b.saga == nil {
				return err
			}
			return b.awaitSaga(ctx)
		}
		if o.compareBin != "" {
			if err := restart(o.compareBin); err != nil {
				return nil, err
			}
			if err := measure("compare", false); err != nil {
				return nil, err
			}
			if err := restart(serviceBin); err != nil {
				return nil, err
			}
		}
		if o.stripeEnabled() {
			b.viaStripe = true
			if err := restart(serviceBin); err != nil {
				return nil, err
			}
			if pass == 1 {
				if err := b.chargeReplayKeys(ctx); err != nil {
					return nil, err
				}
			}
			if err := measure("stripe", true); err != nil {
				return nil, err
			}
			b.viaStripe = false
			if err := restart(serviceBin); err != nil {
				return nil, err
			}
		}
		if !o.ceiling {
			continue
		}
		for _, c := range o.createC {
			r, err := b.pgbench(ctx, "charge", c)
			if err != nil {
				return nil, err
			}
			runs[name("pgbench", "create", c)] = append(runs[name("pgbench", "create", c)], r)
			report(pass, name("pgbench", "create", c), r)
		}
		for _, c := range o.replayC {
			r, err := b.pgbench(ctx, "replay", c)
			if err != nil {
				return nil, err
			}
			runs[name("pgbench", "replay", c)] = append(runs[name("pgbench", "replay", c)], r)
			report(pass, name("pgbench", "replay", c), r)
		}
	}
	if o.statements {
		if err := b.statementRuns(ctx); err != nil {
			return nil, err
		}
	}
	return runs, nil
}

func name(who, what string, c int) string { return fmt.Sprintf("%s %s C=%d", who, what, c) }

func report(pass int, name string, r result) {
	cpu := ""
	if r.CPUPerRequest > 0 {
		cpu = fmt.Sprintf("  CPU %5.0f µs/req", us(r.CPUPerRequest))
	}
	logf("pass %d  %-24s %8.0f req/s  p50 %7.2f ms  p99 %7.2f ms%s  errors %d %s",
		pass, name, r.PerSecond, ms(r.P50), ms(r.P99), cpu, r.Errors, r.FirstError)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// startService runs the payment-service binary bin with its defaults, as
// an operator would, its JSON log going to a file.
func (b *bench) startService(ctx context.Context, bin string) (stop func(), err error) {
	return b.startWrapped(ctx, bin, nil)
}

// startWrapped is startService with bin run by the command wrap (for
// example valgrind), which must exec it in the same process; a wrapped
// service gets longer to become ready.
func (b *bench) startWrapped(ctx context.Context, bin string, wrap []string) (stop func(), err error) {
	httpPort, err := freePort()
	if err != nil {
		return nil, err
	}
	debugPort, err := freePort()
	if err != nil {
		return nil, err
	}
	b.api = "http://127.0.0.1:" + strconv.Itoa(httpPort)
	b.debug = "http://127.0.0.1:" + strconv.Itoa(debugPort)
	logFile, err := os.OpenFile(filepath.Join(b.tmp, "service.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	argv := append(append([]string(nil), wrap...), bin, "serve")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+b.dsn,
		"HTTP_ADDR=127.0.0.1:"+strconv.Itoa(httpPort),
		"DEBUG_ADDR=127.0.0.1:"+strconv.Itoa(debugPort),
		"API_KEYS=bench:"+apiKey,
	)
	cmd.Env = append(cmd.Env, b.providerEnv()...)
	cmd.Env = append(append(cmd.Env, b.env...), b.o.serviceEnv...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	b.servicePID = cmd.Process.Pid
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		// The service wrote the log through descriptors of its own: this
		// one was never written to.
		_ = logFile.Close()
	}
	ready := 30 * time.Second
	if len(wrap) > 0 {
		ready = 5 * time.Minute
	}
	deadline := time.Now().Add(ready)
	for {
		if resp, err := http.Get(b.api + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return stop, nil
			}
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("the service was not ready within %s (log: %s)", ready, logFile.Name())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// chargeReplayKeys charges the replay keys once, each for an order of its
// own (the first replayKeys orders), so that the replays find them.
func (b *bench) chargeReplayKeys(ctx context.Context) error {
	return b.chargeReplayKeyRange(ctx, 0, replayKeys)
}

// chargeReplayKeyRange charges replay keys from to to-1, in order, through
// the running service's provider: key k is order k+1 through the sandbox,
// whose replay keys are charged first; through Stripe the next orders.
func (b *bench) chargeReplayKeyRange(ctx context.Context, from, to int) error {
	logf("charging %d orders once, to replay them", to-from)
	if b.viaStripe && from == 0 {
		b.stripeReplayOrder = b.orders.Load() + 1
	}
	first, _ := b.replayBase()
	for i := from; i < to; i++ {
		order := b.orders.Add(1)
		req := chargeRequest(b.api, apiKey, strconv.Itoa(first+i), b.body(order, "replay_"+strconv.Itoa(i)))
		if status, err := do(http.DefaultClient, req.WithContext(ctx)); err != nil || status != http.StatusCreated {
			return fmt.Errorf("seeding replay key %d: %d %v", i, status, err) //nolint:errorlint // err may be nil: the message shows what came back, and nothing classifies it
		}
	}
	return nil
}

// serviceRun measures the service: "create" makes a new charge per
// request, each for an order of its own; "replay" repeats the charges made
// before the passes.
func (b *bench) serviceRun(ctx context.Context, workload string, clients int, profile bool) (result, error) {
	return b.load(ctx, workload, clients, b.o.warmup, b.o.duration, profile)
}

// load runs workload at clients concurrency for warmup (not measured; 0:
// none) and then for d, measured.
func (b *bench) load(ctx context.Context, workload string, clients int, warmup, d time.Duration, profile bool) (result, error) {
	next := func(c, i int) (*http.Request, int) {
		order := b.orders.Add(1)
		if order > b.lastOrder {
			panic("bench-api: out of orders for the service; options.serviceOrders counts too few")
		}
		id := strconv.FormatInt(order, 10)
		return chargeRequest(b.api, apiKey, "create-"+id, b.body(order, "pi_"+id)), http.StatusCreated
	}
	if workload == "replay" {
		first, firstOrder := b.replayBase()
		next = func(c, i int) (*http.Request, int) {
			k := (c*7919 + i) % replayKeys
			order := firstOrder + int64(k)
			return chargeRequest(b.api, apiKey, strconv.Itoa(first+k), b.body(order, "replay_"+strconv.Itoa(k))), http.StatusCreated
		}
	}
	var profiled chan error
	if profile {
		profiled = make(chan error, 1)
		go func() { profiled <- b.cpuProfile(ctx) }()
	}
	var r result
	var err error
	if b.o.loadgen == "wrk" {
		r, err = b.wrkRun(ctx, workload, clients, warmup, d)
	} else {
		cpu := b.cpuOver(warmup, d)
		r = closedLoop(ctx, clients, warmup, d, next)
		(<-cpu).divide(&r)
	}
	if err != nil {
		return r, err
	}
	if profiled != nil {
		if err := <-profiled; err != nil {
			return r, err
		}
	}
	return r, nil
}

// cpuProfile takes a CPU profile of the service over the measured part of
// a run, from its DEBUG_ADDR listener.
func (b *bench) cpuProfile(ctx context.Context) error {
	select {
	case <-time.After(b.o.warmup):
	case <-ctx.Done():
		return ctx.Err()
	}
	secs := max(1, int(b.o.duration.Seconds())-1)
	resp, err := http.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", b.debug, secs))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	file := b.o.cpuProfile
	if b.viaStripe {
		file += ".stripe" // the same run through Stripe
	}
	f, err := os.Create(file) //nolint:gosec // G304: the file -cpuprofile names
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	logf("CPU profile of the service written to %s (go tool pprof -top %s)", file, file)
	return nil
}

// printServerTime prints what pg_stat_statements says the database spent
// per executed statement of the service, over the whole run.
func (b *bench) printServerTime(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, b.dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `
		SELECT calls, round((total_exec_time / calls)::numeric, 3), left(regexp_replace(query, '\s+', ' ', 'g'), 90)
		  FROM pg_stat_statements
		 WHERE calls > 1000 AND query !~* 'pg_stat_statements'
		   AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		 ORDER BY total_exec_time DESC LIMIT 12`)
	if err != nil {
		return err
	}
	defer rows.Close()
	fmt.Println("\nDatabase server time per call (pg_stat_statements, service and pgbench together):")
	for rows.Next() {
		var calls int64
		var avg float64
		var query string
		if err := rows.Scan(&calls, &avg, &query); err != nil {
			return err
		}
		fmt.Printf("  %9d calls  %7.3f ms  %s\n", calls, avg, query)
	}
	return rows.Err()
}

func exec1(ctx context.Context, dsn, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}
