package main_test

// These tests build and run the real binary: the crash test needs a process
// it can kill -9, and the shutdown test a process it can SIGTERM.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/testdb"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "payment-service-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "payment-service")
	build := exec.Command("go", "build", "-race", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build:", err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	testdb.Main(m)
}

type proc struct {
	cmd     *exec.Cmd
	url     string
	output  *bytes.Buffer
	exited  chan struct{} // closed when the process has exited
	exitErr error         // valid after exited is closed
}

// startProvider runs the sandbox payment provider in this test process, on
// a loopback port: it outlives the service processes the tests kill, and
// its ledger counts their charges.
func startProvider(t *testing.T, cfg sandboxprovider.Config) *sandboxprovider.Server {
	t.Helper()
	s, err := sandboxprovider.Start("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// start runs the binary with env (plus the basics) against the provider and
// waits until /readyz answers 200.
func start(t *testing.T, dsn string, provider *sandboxprovider.Server, env ...string) *proc {
	t.Helper()
	addr := freeAddr(t)
	cmd := exec.Command(binary, "serve")
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"DATABASE_URL=" + dsn,
		"HTTP_ADDR=" + addr,
		"API_KEYS=demo-client:demo-secret",
		"SANDBOX_PROVIDER_URL=" + provider.URL,
	}, env...)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, url: "http://" + addr, output: out, exited: make(chan struct{})}
	go func() { p.exitErr = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("service output:\n%s", out)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(p.url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("service not ready within 20s:\n%s", out)
	return nil
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

const body = `{"orderId":1001,"customerId":42,"amount":"100.50","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_kill"}`

func charge(p *proc, key string) (int, string, error) {
	req, _ := http.NewRequest(http.MethodPost, p.url+"/payments", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer demo-secret")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func providerCalls(t *testing.T, p *proc) string {
	t.Helper()
	resp, err := http.Get(p.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "payment_provider_calls_total{") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

func setup(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	dsn := testdb.New(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	_, err = pool.Exec(context.Background(),
		`INSERT INTO order_projection (order_id, customer_id, amount, currency) VALUES (1001, 42, 100.50, 'RUB')`)
	if err != nil {
		t.Fatal(err)
	}
	return dsn, pool
}

func count(t *testing.T, pool *pgxpool.Pool, query string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), query).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A process killed with SIGKILL while the provider is answering leaves the
// key claimed and the payment reserved. A new process turns a retry away
// while the lock lives, then takes the key over and completes the same
// payment: one row, one successful provider call in the new process.
func TestKilledProcessIsCompletedByRetryAfterLockExpiry(t *testing.T) {
	t.Parallel()
	dsn, pool := setup(t)
	provider := startProvider(t, sandboxprovider.Config{Latency: 2 * time.Second})
	env := []string{"IDEMPOTENCY_LOCK_TIMEOUT=3s", "PROVIDER_TIMEOUT=1500ms", "PROVIDER_MAX_REQUEST_AGE=1s"}

	first := start(t, dsn, provider, env...)
	go func() { _, _, _ = charge(first, "kill-key") }() // never answered: the process dies
	deadline := time.Now().Add(10 * time.Second)
	for count(t, pool, `SELECT count(*) FROM idempotency_record WHERE status = 'IN_PROGRESS' AND payment_id IS NOT NULL`) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first request never claimed the key")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	if n := count(t, pool, `SELECT count(*) FROM payment WHERE status = 'PENDING'`); n != 1 {
		t.Fatalf("after the crash: PENDING payments = %d, want 1", n)
	}

	second := start(t, dsn, provider, env...)
	status, b, err := charge(second, "kill-key")
	if err != nil || status != http.StatusConflict || !strings.Contains(b, "request-in-progress") {
		t.Fatalf("retry while the lock lives: %d %s %v, want 409 request-in-progress", status, b, err)
	}
	// Retry as a client must: 409 in progress until the lock runs out,
	// and 503 outcome-unknown if the resumed call times out too (the
	// killed process may or may not have reached the provider, whose
	// latency is longer than PROVIDER_TIMEOUT).
	var final int
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if final, b, err = charge(second, "kill-key"); err != nil {
			t.Fatal(err)
		}
		if final != http.StatusConflict && !(final == http.StatusServiceUnavailable && strings.Contains(b, "outcome-unknown")) {
			break
		}
	}
	if final != http.StatusCreated || !strings.Contains(b, `"status":"SUCCEEDED"`) {
		t.Fatalf("retry after expiry: %d %s, want 201 SUCCEEDED", final, b)
	}
	if n := count(t, pool, `SELECT count(*) FROM payment`); n != 1 {
		t.Fatalf("payments = %d, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM idempotency_record WHERE status = 'COMPLETED' AND http_status = 201`); n != 1 {
		t.Fatalf("completed records = %d, want 1", n)
	}
	if got := providerCalls(t, second); !strings.Contains(got, `payment_provider_calls_total{outcome="approved",provider="sandbox"} 1`+"\n") &&
		!strings.HasSuffix(got, `payment_provider_calls_total{outcome="approved",provider="sandbox"} 1`) {
		t.Fatalf("provider calls in the new process:\n%s\nwant exactly one approved call", got)
	}
	// At the provider, across both processes: one charge.
	if charged := provider.Ledger().Succeeded("pi_kill"); len(charged) != 1 {
		t.Fatalf("provider ledger for pi_kill: %+v, want one charge", charged)
	}
}

func TestHealthcheckCommand(t *testing.T) {
	t.Parallel()
	dsn, _ := setup(t)
	p := start(t, dsn, startProvider(t, sandboxprovider.Config{}))
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(p.url, "http://"))
	check := func(addr string) error {
		cmd := exec.Command(binary, "healthcheck")
		cmd.Env = []string{"HTTP_ADDR=" + addr}
		return cmd.Run()
	}
	if err := check(":" + port); err != nil {
		t.Fatalf("healthcheck of a ready server: %v", err)
	}
	if err := check(freeAddr(t)); err == nil {
		t.Fatal("healthcheck of a port nobody serves succeeded")
	}
}

// SIGTERM lets an in-flight charge finish before the process exits 0.
func TestSIGTERMFinishesInFlightRequests(t *testing.T) {
	t.Parallel()
	dsn, pool := setup(t)
	provider := startProvider(t, sandboxprovider.Config{Latency: time.Second})
	p := start(t, dsn, provider)

	type result struct {
		status int
		err    error
	}
	done := make(chan result, 1)
	go func() {
		status, _, err := charge(p, "term-key")
		done <- result{status, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for count(t, pool, `SELECT count(*) FROM idempotency_record`) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("request never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.status != http.StatusCreated {
		t.Fatalf("in-flight request: %d %v, want 201", r.status, r.err)
	}
	select {
	case <-p.exited:
		if p.exitErr != nil {
			t.Fatalf("exit: %v, want 0", p.exitErr)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("process did not exit after SIGTERM")
	}
	if n := count(t, pool, `SELECT count(*) FROM idempotency_record WHERE status = 'COMPLETED'`); n != 1 {
		t.Fatalf("completed records = %d, want 1", n)
	}
	if n := len(provider.Ledger().Succeeded("pi_kill")); n != 1 {
		t.Fatalf("charges at the provider = %d, want 1", n)
	}
}

func TestBadConfigurationStopsTheStartNamingTheVariable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env  []string
		want string
	}{
		{[]string{"API_KEYS=demo-client:demo-secret"}, "DATABASE_URL"},
		{[]string{"DATABASE_URL=postgres://x/y", "API_KEYS=demo-client:demo-secret", "SANDBOX_PROVIDER_URL=http://127.0.0.1:1", "IDEMPOTENCY_LOCK_TIMEOUT=soon"}, "IDEMPOTENCY_LOCK_TIMEOUT"},
		{[]string{"DATABASE_URL=postgres://x/y", "API_KEYS=demo-client:demo-secret"}, "SANDBOX_PROVIDER_URL"},
	}
	for _, tc := range tests {
		cmd := exec.Command(binary)
		cmd.Env = tc.env
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want+":") {
			t.Errorf("env %v: err=%v output %q, want a failure naming %s", tc.env, err, out, tc.want)
		}
	}
}

func TestMigrateCommands(t *testing.T) {
	t.Parallel()
	dsn := testdb.New(t)
	run := func(args ...string) string {
		cmd := exec.Command(binary, args...)
		cmd.Env = []string{"DATABASE_URL=" + dsn}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := run("migrate", "status"); !strings.Contains(out, "applied") {
		t.Fatalf("status on a migrated database:\n%s", out)
	}
	run("migrate", "down")
	if out := run("migrate", "status"); !strings.Contains(out, "pending") {
		t.Fatalf("status after down:\n%s", out)
	}
	run("migrate", "up")
	if out := run("migrate", "status"); strings.Contains(out, "pending") {
		t.Fatalf("status after up:\n%s", out)
	}
}
