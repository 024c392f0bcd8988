//go:build pathfiles

// Built with the tag pathfiles (and with coverage: `make path-files`),
// payment-dev is not make dev but a measurement: the files of the service
// that each path runs, counted rather than listed by hand. The README's
// table of the paths comes from its output.
//
// The rule:
//
//   - The binary is built with -cover -covermode=atomic -coverpkg=./...,
//     so every statement of the module counts its runs.
//   - It starts make dev's own stack (run: a throwaway PostgreSQL, the
//     in-process broker, the sandbox provider, the service as make dev
//     configures it) on free loopback ports, with the provider's webhooks
//     off and the completer's and the purge's schedules once a year, so
//     that nothing a clock or the provider starts runs in a measured
//     window.
//   - Each path runs once to warm up (connections, prepared statements,
//     first-use initialisation), then PATHFILES_RUNS times (5 unless
//     set). Before each run, what the path needs is made outside the
//     measurement (an order written into the projection, a payment
//     charged or authorized over HTTP) and its events published; then the
//     counters are cleared, the path runs until its answer (the HTTP
//     response; for an order event, its row in the projection; for a saga
//     step, its reply on payment.replies) and until the events it wrote
//     are published (the outbox relay runs at each commit, so a run that
//     stopped at the answer would catch the relay's work sometimes), and
//     the counters are written.
//   - A file counts when a statement of it ran in more than half of the
//     runs: the consumers' polls, the outbox relay and the broker's
//     clients run beside the path, and what they happen to do during one
//     run is not the path's. The files some runs ran and most did not are
//     printed too, as "not counted".
//   - Counted are the module's Go files but make dev's wiring and its
//     stand-ins for the database, the broker and the provider
//     (notTheService): what a reader opens to follow the path, the shared
//     middleware, logging, tracing and error mapping included. Test files
//     are never instrumented. The SQL files of
//     internal/repository/statements are not Go and are not counted: each
//     is embedded by a counted Go file of the repository.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/coverage"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
)

// init runs the measurement in place of main.go's main (a package has
// one main; this build keeps main.go as make dev has it and never gets
// there). The rule's own test, in the same package, skips it.
func init() {
	if testing.Testing() {
		return
	}
	if err := pathFiles(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "path-files:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// pathFiles measures each path and writes its count to w, then the table
// of the counts.
func pathFiles(w io.Writer) (err error) {
	runs := 5
	if v := os.Getenv("PATHFILES_RUNS"); v != "" {
		if runs, err = strconv.Atoi(v); err != nil || runs < 1 {
			return fmt.Errorf("PATHFILES_RUNS=%q: want a count of runs", v)
		}
	}
	module, err := goOutput("list", "-m")
	if err != nil {
		return err
	}
	scratch, err := os.MkdirTemp("", "path-files-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d, stop, err := startDevStack(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, stop()) }()
	// The driver's steps stop the measurement with a failure, a panic
	// caught here, so that the stack above is always stopped.
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(failure)
			if !ok {
				panic(r)
			}
			err = f.error
		}
	}()

	paths := []struct {
		name string
		// prepare makes what the path needs, outside the measurement, and
		// returns the path's run.
		prepare func() (run func())
	}{
		{"a charge: POST /payments", func() func() {
			order := d.projectOrder()
			return func() { d.charge(order, "automatic") }
		}},
		{"a refund: POST /payments/{id}/refunds", func() func() {
			payment := d.charge(d.projectOrder(), "automatic")
			return func() {
				d.post(fmt.Sprintf("/payments/%d/refunds", payment), map[string]any{"amount": "1.00", "externalRefundId": "re_" + uuid.NewString()})
			}
		}},
		{"a capture: POST /payments/{id}/captures", func() func() {
			payment := d.charge(d.projectOrder(), "manual")
			return func() {
				d.post(fmt.Sprintf("/payments/%d/captures", payment), map[string]any{"amount": "10.00", "currency": "RUB", "externalCaptureId": "cap_" + uuid.NewString()})
			}
		}},
		{"an order event: OrderCreated.v1 to its projection", func() func() {
			return d.publishOrder
		}},
		{"a saga step: ChargeOrder.v1 to its reply", func() func() {
			order := d.projectOrder()
			return func() { d.sagaCharge(order) }
		}},
	}

	if _, err := fmt.Fprintf(w, "path-files: %d runs of each path; a file counts when more than half of them ran a statement of it\n\n", runs); err != nil {
		return err
	}
	var table strings.Builder
	table.WriteString("| path | files | packages |\n|---|---|---|\n")
	for i, p := range paths {
		p.prepare()() // the warm-up
		var ran [][]string
		for j := range runs {
			run := p.prepare()
			d.awaitPublished()
			dir := filepath.Join(scratch, fmt.Sprintf("%d-%d", i, j))
			files, err := measure(dir, module, func() { run(); d.awaitPublished() })
			if err != nil {
				return err
			}
			ran = append(ran, files)
		}
		c := countRuns(ran)
		if _, err := io.WriteString(w, c.report(p.name, runs)+"\n"); err != nil {
			return err
		}
		fmt.Fprintf(&table, "| %s | %d | %d |\n", p.name, len(c.files), c.packages)
	}
	_, err = io.WriteString(w, table.String())
	return err
}

// measure clears the coverage counters, calls run, writes the counters
// to dir and returns the files whose statements ran (coveredFiles).
func measure(dir, module string, run func()) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// The meta-data first: covdata reads it beside the counters, and
	// ClearCounters refuses until the counters' mode is known from it.
	if err := coverage.WriteMetaDir(dir); err != nil {
		return nil, fmt.Errorf("%w (make path-files builds payment-dev with -cover -covermode=atomic)", err)
	}
	if err := coverage.ClearCounters(); err != nil {
		return nil, err
	}
	run()
	if err := coverage.WriteCountersDir(dir); err != nil {
		return nil, err
	}
	text := filepath.Join(dir, "profile.txt")
	if _, err := goOutput("tool", "covdata", "textfmt", "-i="+dir, "-o="+text); err != nil {
		return nil, err
	}
	profile, err := os.ReadFile(text) //nolint:gosec // G304: the profile covdata wrote just now into the measurement's own directory
	if err != nil {
		return nil, err
	}
	return coveredFiles(bytes.NewReader(profile), module)
}

// goOutput runs the go command ($GO, as the Makefile names it, or go).
func goOutput(args ...string) (string, error) {
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	out, err := exec.Command(goCmd, args...).Output() //nolint:gosec // G702: the go command the Makefile runs with, on this program's own arguments
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", goCmd, strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// notTheService are the module's directories that make dev runs but the
// service is not: its wiring, and the stand-ins for the database, the
// broker and the provider. Everything else of the module counts.
var notTheService = []string{
	"cmd/payment-dev/",          // make dev's wiring, and this measurement
	"internal/pgtemp/",          // the throwaway PostgreSQL
	"internal/kafkatest/",       // the in-process Kafka-protocol broker
	"internal/sandboxprovider/", // the sandbox provider's server (its client, internal/provider/sandbox, counts)
	"internal/demoorders/",      // the tour's orders
}

// coveredFiles reads a coverage profile in the text format (`go tool
// covdata textfmt`: a mode line, then "file:start,end statements count")
// and returns the module's files, relative to its root, that have a block
// run at least once, minus notTheService, sorted.
func coveredFiles(profile io.Reader, module string) ([]string, error) {
	ran := map[string]bool{}
	sc := bufio.NewScanner(profile)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "mode:") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 || !strings.Contains(fields[0], ":") {
			return nil, fmt.Errorf("not a coverage profile's line: %q", line)
		}
		block := fields[0]
		file, ok := strings.CutPrefix(block[:strings.LastIndex(block, ":")], module+"/")
		if ok && fields[2] != "0" && isTheService(file) {
			ran[file] = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	files := make([]string, 0, len(ran))
	for f := range ran {
		files = append(files, f)
	}
	slices.Sort(files)
	return files, nil
}

func isTheService(file string) bool {
	for _, dir := range notTheService {
		if strings.HasPrefix(file, dir) {
			return false
		}
	}
	return true
}

// pathCount is what the runs of one path ran: the files more than half
// of the runs ran (the count) in how many directories, and the others
// some run ran, with how many runs did (what the background did
// meanwhile).
type pathCount struct {
	files    []string
	packages int
	noise    map[string]int
}

// countRuns applies the majority rule to the files of each run of a path.
func countRuns(runs [][]string) pathCount {
	seen := map[string]int{}
	for _, files := range runs {
		for _, f := range files {
			seen[f]++
		}
	}
	c := pathCount{noise: map[string]int{}}
	dirs := map[string]bool{}
	for f, n := range seen {
		if 2*n > len(runs) {
			c.files = append(c.files, f)
			dirs[filepath.Dir(f)] = true
		} else {
			c.noise[f] = n
		}
	}
	slices.Sort(c.files)
	c.packages = len(dirs)
	return c
}

// report is a path's count: the totals, the files, and what some runs
// but not most ran.
func (c pathCount) report(name string, runs int) string {
	var w strings.Builder
	fmt.Fprintf(&w, "%s: %d files, %d packages\n", name, len(c.files), c.packages)
	for _, f := range c.files {
		fmt.Fprintf(&w, "    %s\n", f)
	}
	noise := make([]string, 0, len(c.noise))
	for f := range c.noise {
		noise = append(noise, f)
	}
	slices.Sort(noise)
	for _, f := range noise {
		fmt.Fprintf(&w, "  not counted, ran in %d of %d runs: %s\n", c.noise[f], runs, f)
	}
	return w.String()
}

// failure is how a step of the driver stops the measurement (pathFiles
// recovers it).
type failure struct{ error }

func check(err error) {
	if err != nil {
		panic(failure{err})
	}
}

// pathDriver drives the dev stack as its clients do: over HTTP and the
// broker. It writes orders into the projection directly, outside the
// service, when a path only needs one to exist.
type pathDriver struct {
	api     string
	db      *pgx.Conn
	broker  *kafka.Writer
	replies *kafka.Reader
	orders  int64
}

// startDevStack starts make dev's stack and a driver of it; stop stops
// both.
func startDevStack(ctx context.Context) (d *pathDriver, stop func() error, err error) {
	for name, value := range map[string]string{
		"HTTP_ADDR": "127.0.0.1:0", "DEV_KAFKA_PORT": "0", "DEV_PROVIDER_PORT": "0",
		"KAFKA_BROKERS": "", "SANDBOX_PROVIDER_URL": "", "SANDBOX_WEBHOOK_URL": "",
		"CHARGE_COMPLETER_CRON": "0 0 0 1 1 *", "IDEMPOTENCY_CLEANUP_CRON": "0 0 0 1 1 *",
		"LOG_LEVEL": "error",
	} {
		if err := os.Setenv(name, value); err != nil {
			return nil, nil, err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	up := make(chan devStack, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, func(s devStack) { up <- s }) }()
	var s devStack
	select {
	case s = <-up:
	case err := <-done:
		cancel()
		return nil, nil, fmt.Errorf("make dev's stack: %w", err)
	}
	stopStack := func() error {
		cancel()
		return <-done
	}
	db, err := pgx.Connect(ctx, s.dsn)
	if err != nil {
		return nil, nil, errors.Join(err, stopStack())
	}
	brokers := strings.Split(s.brokers, ",")
	d = &pathDriver{
		api: "http://" + s.addr, db: db, orders: 900000,
		broker: &kafka.Writer{Addr: kafka.TCP(brokers...), Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond},
		replies: kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: "payment.replies", GroupID: "path-files",
			StartOffset: kafka.FirstOffset, MaxWait: 50 * time.Millisecond}),
	}
	return d, func() error {
		return errors.Join(d.broker.Close(), d.replies.Close(), db.Close(context.Background()), stopStack())
	}, nil
}

// projectOrder writes a new order of 10.00 RUB for customer 42 into the
// projection, as its event would, and returns its id.
func (d *pathDriver) projectOrder() int64 {
	d.orders++
	_, err := d.db.Exec(context.Background(),
		`INSERT INTO order_projection (order_id, customer_id, amount, currency) VALUES ($1, 42, 10.00, 'RUB')`, d.orders)
	check(err)
	return d.orders
}

// publishOrder publishes a new order's OrderCreated.v1 and returns once
// the service has projected it.
func (d *pathDriver) publishOrder() {
	d.orders++
	event, err := json.Marshal(map[string]any{
		"eventId": uuid.Must(uuid.NewV7()).String(), "eventType": "OrderCreated.v1", "orderId": d.orders,
		"customerId": 42, "amount": "10.00", "currency": "RUB", "occurredAt": time.Now().UTC().Format(time.RFC3339Nano),
	})
	check(err)
	d.write("order.events", strconv.FormatInt(d.orders, 10), event)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		var projected bool
		check(d.db.QueryRow(context.Background(),
			`SELECT EXISTS (SELECT 1 FROM order_projection WHERE order_id = $1)`, d.orders).Scan(&projected))
		if projected {
			return
		}
		if time.Now().After(deadline) {
			check(fmt.Errorf("order %d was not projected within a minute", d.orders))
		}
	}
}

// awaitPublished returns once the outbox holds no event the relay has
// not published.
func (d *pathDriver) awaitPublished() {
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		var pending bool
		check(d.db.QueryRow(context.Background(),
			`SELECT EXISTS (SELECT 1 FROM outbox_event WHERE published_at IS NULL)`).Scan(&pending))
		if !pending {
			return
		}
		if time.Now().After(deadline) {
			check(errors.New("the outbox was not published within a minute"))
		}
	}
}

// charge charges order over HTTP, captureMethod "automatic" or "manual"
// (an authorization), and returns the payment's id.
func (d *pathDriver) charge(order int64, captureMethod string) int64 {
	return d.post("/payments", map[string]any{
		"orderId": order, "customerId": 42, "amount": "10.00", "currency": "RUB", "paymentProvider": "sandbox",
		"externalPaymentId": fmt.Sprintf("pi_path_%d", order), "captureMethod": captureMethod,
	})
}

// post sends body under a new key with the demo client's key, wants 201
// and returns the created resource's id.
func (d *pathDriver) post(path string, body map[string]any) int64 {
	b, err := json.Marshal(body)
	check(err)
	req, err := http.NewRequest(http.MethodPost, d.api+path, bytes.NewReader(b))
	check(err)
	req.Header.Set("Authorization", "Bearer demo-secret")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "path-files-"+uuid.NewString())
	resp, err := http.DefaultClient.Do(req)
	check(err)
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	check(err)
	if resp.StatusCode != http.StatusCreated {
		check(fmt.Errorf("POST %s: %d %s", path, resp.StatusCode, answer))
	}
	var created struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal(answer, &created); err != nil {
		check(fmt.Errorf("POST %s: %w in %s", path, err, answer))
	}
	return created.ID
}

// sagaCharge sends a saga's ChargeOrder.v1 for order and returns once its
// reply, PaymentStepCharged.v1, is on payment.replies.
func (d *pathDriver) sagaCharge(order int64) {
	saga := uuid.NewString()
	command, err := json.Marshal(map[string]any{
		"eventId": uuid.Must(uuid.NewV7()).String(), "eventType": "ChargeOrder.v1", "sagaId": saga, "stepName": "charge-payment",
		"orderId": order, "customerId": 42, "amount": "10.00", "currency": "RUB", "paymentProvider": "sandbox",
		"externalPaymentId": "pi_path_saga_" + saga, "occurredAt": time.Now().UTC().Format(time.RFC3339Nano),
	})
	check(err)
	d.write("payment.commands", saga, command)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		m, err := d.replies.ReadMessage(ctx)
		if err != nil {
			check(fmt.Errorf("the reply to saga %s: %w", saga, err))
		}
		var reply struct {
			SagaID    string `json:"sagaId"`
			EventType string `json:"eventType"`
		}
		if json.Unmarshal(m.Value, &reply) != nil || reply.SagaID != saga {
			continue
		}
		if reply.EventType != "PaymentStepCharged.v1" {
			check(fmt.Errorf("saga %s was answered %s", saga, m.Value))
		}
		return
	}
}

func (d *pathDriver) write(topic, key string, value []byte) {
	err := d.broker.WriteMessages(context.Background(), kafka.Message{Topic: topic, Key: []byte(key), Value: value})
	if err != nil {
		check(fmt.Errorf("publish to %s: %w", topic, err))
	}
}
