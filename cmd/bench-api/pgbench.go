package main

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/example/payment-service/internal/pgtemp"
)

// pgbenchScripts are the pgbench scripts of the service's own statements,
// kept next to the SQL they copy (a test in internal/repository fails when
// the statements change and the scripts do not).
const pgbenchDir = "internal/repository/pgbench"

// pgbenchVars are the -D variables the scripts read: what the service would
// send for a typical charge. Only the ones that vary per transaction are
// drawn in the scripts.
var pgbenchVars = map[string]string{
	"client":   "bench",
	"customer": "42",
	"amount":   "10.00",
	"currency": "RUB",
	"provider": "sandbox",
	// A charge, not an authorization, and no reply: an HTTP command's.
	"capture_method": "automatic",
	"payment_method": "pm_card_visa", // pgbench takes no empty value; a charge that names its method stores one
	"reply":          "false",
	"reply_event_id": "00000000-0000-0000-0000-000000000000",
	"reply_topic":    "payment.replies",
	"reply_key":      "none",
	"reply_type":     "none",
	"hash":           "6f1ed002ab5595859014ebf0951522d9a3ef9ea8c7e0b2a2f1f2c8a3e7d1c0b4",
	"lock_micros":    "30000000",
	"final_status":   "SUCCEEDED",
	"http_status":    "201",
	"response":       `{"id":1,"orderId":1,"customerId":42,"amount":"10.00","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_1","status":"SUCCEEDED","createdAt":"2026-12-01T00:00:00Z"}`,
	"topic":          "payment.events",
	"event_type":     "PaymentSucceeded.v1",
	"payload":        `{"eventId":"019ad4c2-5f0e-7c3a-9b1d-2e4f6a8c0b13","eventType":"PaymentSucceeded.v1","paymentId":1,"orderId":1,"customerId":42,"amount":"10.00","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_1","occurredAt":"2026-12-01T00:00:00Z"}`,
	// The replay keys the bench charged through the API, numbers so that
	// pgbench can draw them.
	"first_replay_key": strconv.Itoa(firstReplayKey),
	"last_replay_key":  strconv.Itoa(firstReplayKey + replayKeys - 1),
}

// pgbenchBinary is the pgbench beside the server binaries in bindir, else
// beside the installed ones (pgtemp.InstalledBinDir). The downloaded
// binaries (docs/decisions/0023-postgresql-binaries.md) have none:
// pgbench is a client the service never needs, so it comes from Debian's
// postgresql package.
func pgbenchBinary(bindir string) (string, error) {
	dirs := []string{bindir}
	if installed, ok := pgtemp.InstalledBinDir(); ok {
		dirs = append(dirs, installed)
	}
	for _, dir := range dirs {
		path := filepath.Join(dir, "pgbench")
		if info, err := os.Stat(path); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			return path, nil
		}
	}
	return "", fmt.Errorf("no pgbench beside %s nor beside installed server binaries: install Debian's postgresql package (apt-get install postgresql), or run with -ceiling=false", bindir)
}

// pgbench runs one script at clients concurrency for warmup+duration on
// the bench cluster and measures, from pgbench's per-transaction log, the
// transactions that ended after the warmup.
func (b *bench) pgbench(ctx context.Context, script string, clients int) (result, error) {
	u, err := url.Parse(b.dsn)
	if err != nil {
		return result{}, err
	}
	prefix := filepath.Join(b.tmp, fmt.Sprintf("pgbench-%s-%d-%d", script, clients, time.Now().UnixNano()))
	args := []string{
		"-n", "-M", "prepared",
		"-h", u.Hostname(), "-p", u.Port(), "-U", u.User.Username(),
		"-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, 2)),
		"-T", strconv.Itoa(int((b.o.warmup + b.o.duration).Seconds())),
		"-f", filepath.Join(pgbenchDir, script+".pgbench"),
		"--log", "--log-prefix", prefix,
	}
	for _, k := range slices.Sorted(maps.Keys(pgbenchVars)) {
		args = append(args, "-D", k+"="+pgbenchVars[k])
	}
	args = append(args, strings.TrimPrefix(u.Path, "/"))
	start := time.Now()
	cmd := exec.CommandContext(ctx, b.pgbenchBin, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return result{}, fmt.Errorf("pgbench %s C=%d: %w\n%s", script, clients, err, out)
	}
	return readPgbenchLogs(prefix, start.Add(b.o.warmup), b.o.duration)
}

// readPgbenchLogs reads pgbench's per-transaction logs (one file per
// thread): "client_id transaction_no time_us script_no epoch epoch_us".
func readPgbenchLogs(prefix string, from time.Time, d time.Duration) (result, error) {
	files, err := filepath.Glob(prefix + ".*")
	if err != nil || len(files) == 0 {
		return result{}, fmt.Errorf("no pgbench log at %s.*", prefix)
	}
	var latencies []time.Duration
	errs := 0
	for _, name := range files {
		f, err := os.Open(name) //nolint:gosec // G304: pgbench's logs, named by this run
		if err != nil {
			return result{}, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 6 {
				continue
			}
			if fields[2] == "failed" || fields[2] == "skipped" {
				errs++
				continue
			}
			us, err1 := strconv.ParseInt(fields[2], 10, 64)
			sec, err2 := strconv.ParseInt(fields[4], 10, 64)
			usec, err3 := strconv.ParseInt(fields[5], 10, 64)
			if err1 != nil || err2 != nil || err3 != nil {
				continue
			}
			end := time.Unix(sec, usec*1000)
			if end.Before(from) || end.After(from.Add(d)) {
				continue
			}
			latencies = append(latencies, time.Duration(us)*time.Microsecond)
		}
		_ = f.Close() // read only
		if err := sc.Err(); err != nil {
			return result{}, err
		}
	}
	slices.Sort(latencies)
	return result{
		Requests:  len(latencies),
		Errors:    errs,
		Duration:  d,
		PerSecond: float64(len(latencies)) / d.Seconds(),
		P50:       percentile(latencies, 0.50),
		P99:       percentile(latencies, 0.99),
	}, nil
}

// row is one line of the table: medians over the passes.
type row struct {
	Workload    string  `json:"workload"` // create or replay
	Concurrency int     `json:"concurrency"`
	Service     result  `json:"service"`
	Ceiling     *result `json:"ceiling,omitempty"`
	Ratio       float64 `json:"ratio,omitempty"` // service / ceiling requests per second
	// Compare is -compare-bin's binary, measured in the same passes.
	Compare      *result `json:"compare,omitempty"`
	CompareRatio float64 `json:"compareRatio,omitempty"` // compare / ceiling requests per second
}

type table struct {
	Passes        int           `json:"passes"`
	Duration      time.Duration `json:"duration"`
	LoadGenerator string        `json:"loadGenerator"`
	Rows          []row         `json:"rows"`
	ColdStart     []coldStart   `json:"coldStart,omitempty"`
	// Instructions are the callgrind counts (-instructions), per binary
	// and round.
	Instructions []instructionCount `json:"instructions,omitempty"`
	// Scale is -scale's report, alone in its file.
	Scale *scaleReport `json:"scale,omitempty"`
}

func summarize(o options, runs map[string][]result) table {
	t := table{Passes: o.passes, Duration: o.duration, LoadGenerator: o.loadgen}
	add := func(workload string, cs []int) {
		for _, c := range cs {
			r := row{Workload: workload, Concurrency: c, Service: median(runs[name("service", workload, c)])}
			if cmp, ok := runs[name("compare", workload, c)]; ok {
				m := median(cmp)
				r.Compare = &m
			}
			if ceil, ok := runs[name("pgbench", workload, c)]; ok {
				m := median(ceil)
				r.Ceiling = &m
				if m.PerSecond > 0 {
					r.Ratio = r.Service.PerSecond / m.PerSecond
					if r.Compare != nil {
						r.CompareRatio = r.Compare.PerSecond / m.PerSecond
					}
				}
			}
			t.Rows = append(t.Rows, r)
		}
	}
	add("create", o.createC)
	add("replay", o.replayC)
	return t
}

// median takes the median of each figure on its own.
func median(rs []result) result {
	if len(rs) == 0 {
		return result{}
	}
	pick := func(f func(result) float64) float64 { return medianBy(rs, f) }
	m := rs[0]
	m.PerSecond = pick(func(r result) float64 { return r.PerSecond })
	m.P50 = time.Duration(pick(func(r result) float64 { return float64(r.P50) }))
	m.P99 = time.Duration(pick(func(r result) float64 { return float64(r.P99) }))
	m.Requests = int(pick(func(r result) float64 { return float64(r.Requests) }))
	m.Errors = int(pick(func(r result) float64 { return float64(r.Errors) }))
	m.CPUPerRequest = time.Duration(pick(func(r result) float64 { return float64(r.CPUPerRequest) }))
	m.DBCPUPerRequest = time.Duration(pick(func(r result) float64 { return float64(r.DBCPUPerRequest) }))
	return m
}

// medianBy is the median of f over rs (the upper one of an even count).
func medianBy[T any](rs []T, f func(T) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

func (t table) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Medians of %d passes, %s each, load from %s:\n\n", t.Passes, t.Duration, t.LoadGenerator)
	compare := len(t.Rows) > 0 && t.Rows[0].Compare != nil
	b.WriteString("| workload | C | service req/s | p50 ms | p99 ms | CPU µs/req | pgbench tx/s | p50 ms | p99 ms | ratio |")
	if compare {
		b.WriteString(" compare req/s | CPU µs/req | ratio |")
	}
	b.WriteString("\n|---|---|---|---|---|---|---|---|---|---|")
	if compare {
		b.WriteString("---|---|---|")
	}
	b.WriteString("\n")
	for _, r := range t.Rows {
		fmt.Fprintf(&b, "| %s | %d | %.0f | %.2f | %.2f | %.0f |", r.Workload, r.Concurrency,
			r.Service.PerSecond, ms(r.Service.P50), ms(r.Service.P99), us(r.Service.CPUPerRequest))
		if r.Ceiling != nil {
			fmt.Fprintf(&b, " %.0f | %.2f | %.2f | %.2f |", r.Ceiling.PerSecond, ms(r.Ceiling.P50), ms(r.Ceiling.P99), r.Ratio)
		} else {
			b.WriteString(" – | – | – | – |")
		}
		switch {
		case r.Compare != nil && r.Ceiling != nil:
			fmt.Fprintf(&b, " %.0f | %.0f | %.2f |", r.Compare.PerSecond, us(r.Compare.CPUPerRequest), r.CompareRatio)
		case r.Compare != nil: // no ceiling (-ceiling=false), so no ratio to it
			fmt.Fprintf(&b, " %.0f | %.0f | – |", r.Compare.PerSecond, us(r.Compare.CPUPerRequest))
		case compare:
			b.WriteString(" – | – | – |")
		}
		b.WriteString("\n")
	}
	return b.String()
}
