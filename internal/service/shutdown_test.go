package service_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payment-service/internal/config"
	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/service"
	"github.com/example/payment-service/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

const apiKey = "demo-secret"

// syncBuffer is a log sink the service and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type running struct {
	url  string
	stop func() (time.Time, error) // cancels Run, waits for it; when it returned, and its error
}

func run(t *testing.T, dsn string, logs io.Writer, envs ...map[string]string) *running {
	t.Helper()
	vars := map[string]string{
		"DATABASE_URL": dsn,
		"HTTP_ADDR":    "127.0.0.1:0",
		"API_KEYS":     "demo-client:" + apiKey,
	}
	for _, env := range envs {
		for k, v := range env {
			vars[k] = v
		}
	}
	cfg, err := config.Load(func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := service.New(ctx, cfg, slog.New(slog.NewJSONHandler(logs, nil)))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	var once sync.Once
	var runErr error
	var returned time.Time
	stop := func() (time.Time, error) {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
				returned = time.Now()
			case <-time.After(60 * time.Second):
				t.Fatal("Run did not return within 60s")
			}
		})
		return returned, runErr
	}
	t.Cleanup(func() { _, _ = stop() })
	return &running{url: "http://" + svc.Addr(), stop: stop}
}

func charge(url, key string) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, url+"/payments", strings.NewReader(
		`{"orderId":1001,"customerId":42,"amount":"100.50","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_shutdown"}`))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// A charge still running when SHUTDOWN_TIMEOUT runs out (here the provider
// takes 4s and the shutdown allows 1s) is never left running under a closed
// database pool: Run aborts it, waits for it to return, names its key in
// the log, and only then closes the pool. What it leaves is the recovery
// point of a lost provider answer, a claimed key with its PENDING payment,
// which the client's retry takes over and charges once.
func TestShutdownNeverClosesThePoolUnderARunningCharge(t *testing.T) {
	t.Parallel()
	dsn := testdb.New(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	count := func(q string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(context.Background(), q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := pool.Exec(context.Background(), `INSERT INTO order_projection (order_id, customer_id, amount, currency) VALUES (1001, 42, 100.50, 'RUB')`); err != nil {
		t.Fatal(err)
	}

	// The provider takes 4s to charge, whatever its client does meanwhile.
	sandbox, err := sandboxprovider.Start("127.0.0.1:0", sandboxprovider.Config{Latency: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sandbox.Close() })
	env := map[string]string{"SANDBOX_PROVIDER_URL": sandbox.URL, "IDEMPOTENCY_LOCK_TIMEOUT": "10s", "PROVIDER_TIMEOUT": "5s"}

	logs := &syncBuffer{}
	first := run(t, dsn, logs, map[string]string{"SHUTDOWN_TIMEOUT": "1s"}, env)
	type result struct {
		status int
		at     time.Time
	}
	answered := make(chan result, 1)
	go func() {
		status, _, _ := charge(first.url, "slow-key")
		answered <- result{status, time.Now()}
	}()
	// Phase 2: the key is claimed and the payment reserved; the provider
	// is being asked.
	deadline := time.Now().Add(30 * time.Second)
	for count(`SELECT count(*) FROM idempotency_record WHERE status = 'IN_PROGRESS' AND payment_id IS NOT NULL`) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the charge never reached the provider")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Run says the shutdown ran out of time (the exit status tells the
	// orchestrator), and has cleaned up after it.
	returned, runErr := first.stop()
	if !errors.Is(runErr, context.DeadlineExceeded) {
		t.Errorf("Run = %v, want the HTTP shutdown's deadline error", runErr)
	}
	// The handler returned before Run did, so its answer is on its way;
	// before the fix it was still waiting for the provider, under a pool
	// Run had closed.
	select {
	case r := <-answered:
		if r.at.Before(returned) {
			t.Logf("answered %s before Run returned", returned.Sub(r.at))
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the charge was still running after Run returned: the pool was closed under it")
	}
	log := logs.String()
	if !strings.Contains(log, "slow-key") || !strings.Contains(log, "left to the takeover") {
		t.Errorf("the log does not name the key left running:\n%s", log)
	}
	if strings.Contains(log, "database is closed") {
		t.Errorf("a charge used the closed pool:\n%s", log)
	}
	if n := count(`SELECT count(*) FROM idempotency_record r JOIN payment p ON p.id = r.payment_id
		WHERE r.idempotency_key = 'slow-key' AND r.status = 'IN_PROGRESS' AND p.status = 'PENDING'`); n != 1 {
		t.Fatalf("the key is not left as a recovery point (claim + PENDING payment)")
	}

	// The client's retry, on a replica that is up: it takes the key over
	// (at once if the aborted charge could end its lock early, else when
	// the lock expires) and asks the provider again with the same provider
	// key, which is in progress or answers the charge it made.
	second := run(t, dsn, io.Discard, env)
	deadline = time.Now().Add(30 * time.Second)
	for {
		status, body, err := charge(second.url, "slow-key")
		if err != nil {
			t.Fatal(err)
		}
		if status == http.StatusCreated {
			break
		}
		if status != http.StatusConflict && status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("retry: %d %s", status, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := len(sandbox.Ledger().Succeeded("pi_shutdown")); got != 1 {
		t.Errorf("charges at the provider = %d, want 1", got)
	}
	if n := count(`SELECT count(*) FROM payment WHERE status = 'SUCCEEDED'`); n != 1 {
		t.Errorf("succeeded payments = %d, want 1", n)
	}
	if n := count(`SELECT count(*) FROM payment`); n != 1 {
		t.Errorf("payments = %d, want 1", n)
	}
	if n := count(`SELECT count(*) FROM idempotency_record WHERE status = 'COMPLETED'`); n != 1 {
		t.Errorf("completed records = %d, want 1", n)
	}
}
