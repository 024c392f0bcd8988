package service_test

import (
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/example/payment-service/internal/kafkatest"
	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/servicetest"
	"github.com/example/payment-service/internal/testdb"
)

func TestMain(m *testing.M) {
	if reconcileChild() {
		return
	}
	testdb.Main(m)
}

const apiKey = "demo-secret" // servicetest.BaseEnv's demo-client

func charge(url, key string) (int, string, error) {
	return chargeBody(url, key, `{"orderId":1001,"customerId":42,"amount":"100.50","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_shutdown"}`)
}

func chargeBody(url, key, body string) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, url+"/payments", strings.NewReader(body))
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
	env := map[string]string{"IDEMPOTENCY_LOCK_TIMEOUT": "10s", "PROVIDER_TIMEOUT": "5s", "PROVIDER_MAX_REQUEST_AGE": "1s"}

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
	// The handler returned before Run did, so its answer is on its way
	// rather than still waiting for the provider under a pool Run has
	// closed.
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

// The relay has a shutdown bound of its own, after every writer stopped: an
// HTTP drain stuck until its bound (a charge whose provider answers late)
// does not leave the relay without time to publish an event committed
// before the shutdown. Here the broker refuses the event until the drain
// has run out of its 1s; the relay then publishes it within its own bound,
// and Run returns. A relay that shared the drain's deadline would be
// cancelled as soon as it passed, and the event would wait in the outbox
// for the next start.
func TestAStuckDrainLeavesTheRelayItsOwnTimeToPublish(t *testing.T) {
	t.Parallel()
	dsn := testdb.New(t)
	cluster, brokers := kafkatest.Cluster(t, kfake.NumBrokers(1))
	topic := kafkatest.CreateTopic(t, brokers, 1)
	env := map[string]string{
		"KAFKA_BROKERS":                     strings.Join(brokers, ","),
		"PAYMENT_EVENTS_TOPIC":              topic,
		"ORDER_EVENTS_TOPIC":                kafkatest.CreateTopic(t, brokers, 1),
		"ORDER_EVENTS_DLT_TOPIC":            kafkatest.CreateTopic(t, brokers, 1),
		"ORDER_CONSUMER_GROUP":              "order-projection-" + strings.ReplaceAll(t.Name(), "/", "-"),
		"KAFKA_CONSUMER_MAX_WAIT":           "100ms",
		"KAFKA_CONSUMER_HEARTBEAT_INTERVAL": "100ms",
		"KAFKA_CONSUMER_SESSION_TIMEOUT":    "1s",
		"OUTBOX_POLL_INTERVAL":              "200ms",
		"SHUTDOWN_TIMEOUT":                  "1s",
		"SHUTDOWN_RELAY_TIMEOUT":            "10s",
	}
	logs := &servicetest.LogBuffer{}
	svc := servicetest.Start(t, servicetest.Options{DSN: dsn, Env: env, Logs: logs})
	ctx := context.Background()
	if _, err := svc.DB.Exec(ctx, `INSERT INTO order_projection (order_id, customer_id, amount, currency) VALUES (1001, 42, 100.50, 'RUB'), (1002, 42, 7.00, 'RUB')`); err != nil {
		t.Fatal(err)
	}

	// The broker refuses the payment event until it is told otherwise.
	refused := cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.PolicyViolation, Count: -1})
	if status, body, err := charge(svc.URL, "committed-before-shutdown"); err != nil || status != http.StatusCreated {
		t.Fatalf("charge: %d %s %v", status, body, err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := refused.Wait(waitCtx, 1); err != nil {
		t.Fatalf("the relay never tried to publish the event: %v", err)
	}

	// A charge whose provider answers late (slow_: after the service
	// stopped waiting, PROVIDER_TIMEOUT) keeps the HTTP drain busy until
	// its bound; then it is aborted and left to the takeover.
	go func() {
		_, _, _ = chargeBody(svc.URL, "stuck", `{"orderId":1002,"customerId":42,"amount":"7.00","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"slow_shutdown"}`)
	}()
	for deadline := time.Now().Add(30 * time.Second); svc.Count(t, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = 'stuck' AND status = 'IN_PROGRESS' AND payment_id IS NOT NULL`) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the slow charge never reached the provider")
		}
		time.Sleep(10 * time.Millisecond)
	}

	stopped := make(chan error, 1)
	go func() { stopped <- svc.Stop() }()
	// The broker takes the event again once the drain has run out of its
	// bound (or, should that never be logged, a little later than it could
	// have: the check below is on what was published, not on this wait).
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline) && !strings.Contains(logs.String(), `"stage":"http drain"`); {
		time.Sleep(10 * time.Millisecond)
	}
	refused.Remove()

	if runErr := <-stopped; !errors.Is(runErr, context.DeadlineExceeded) {
		t.Errorf("Run = %v, want the HTTP drain's deadline error", runErr)
	}
	if !strings.Contains(logs.String(), `"stage":"http drain"`) {
		t.Errorf("the log does not say the HTTP drain ran out of its bound:\n%s", logs.String())
	}
	if n := svc.Count(t, `SELECT count(*) FROM outbox_event WHERE published_at IS NOT NULL`); n != 1 {
		t.Fatalf("events published when Run returned = %d, want 1: the relay had no time of its own", n)
	}
	records := kafkatest.ReadAll(t, brokers, topic, 10*time.Second)
	if len(records) != 1 {
		t.Fatalf("records on %s = %d, want 1", topic, len(records))
	}
}

// A client's connection that never sent a request (an HTTP client dials
// ahead, and a burst of requests leaves such a connection in its pool) is
// closed by http.Server.Shutdown only once it is five seconds old, Go's
// grace for a request still to come. A test service's shutdown bound must
// outlast that grace, or such a connection fails its stop with "http
// shutdown: context deadline exceeded" (seen once in CI, after 30
// concurrent refunds).
func TestTestServiceStopsWithAConnectionThatNeverSentARequest(t *testing.T) {
	t.Parallel()
	svc := servicetest.Start(t, servicetest.Options{DSN: testdb.New(t)})
	// Dial just after a second begins: Go counts the connection's age in
	// whole seconds, so it stays "new" for nearly six.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 20*time.Millisecond)))
	conn, err := net.Dial("tcp", strings.TrimPrefix(svc.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := svc.Stop(); err != nil {
		t.Errorf("stop with a connection that never sent a request: %v", err)
	}
}
