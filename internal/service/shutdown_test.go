package service_test

import (
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/servicetest"
	"github.com/example/payment-service/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

const apiKey = "demo-secret" // servicetest.BaseEnv's demo-client

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
	env := map[string]string{"IDEMPOTENCY_LOCK_TIMEOUT": "10s", "PROVIDER_TIMEOUT": "5s"}

	logs := &servicetest.LogBuffer{}
	first := servicetest.Start(t, servicetest.Options{DSN: dsn, Env: withEnv(env, "SHUTDOWN_TIMEOUT", "1s"), Sandbox: sandbox, Logs: logs})
	type result struct {
		status int
		at     time.Time
	}
	answered := make(chan result, 1)
	go func() {
		status, _, _ := charge(first.URL, "slow-key")
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
	runErr := first.Stop()
	returned := time.Now()
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
	second := servicetest.Start(t, servicetest.Options{DSN: dsn, Env: env, Sandbox: sandbox})
	deadline = time.Now().Add(30 * time.Second)
	for {
		status, body, err := charge(second.URL, "slow-key")
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

// withEnv returns env with name set to value, leaving env as it was.
func withEnv(env map[string]string, name, value string) map[string]string {
	out := maps.Clone(env)
	out[name] = value
	return out
}
