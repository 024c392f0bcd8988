//go:build fault

package fault

// The harness: one PostgreSQL cluster, one Kafka broker, the HTTP sandbox
// provider in this process (its ledger outlives every service process the
// tests kill), a fault proxy in front of it, and replicas of the real
// payment-service binary, each behind a fault proxy of its own.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payment-service/db/migrations"
	"github.com/example/payment-service/internal/faultproxy"
	"github.com/example/payment-service/internal/kafkatest"
	"github.com/example/payment-service/internal/pgtemp"
	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/stripefake"
)

var (
	binary string

	raceBinary = flag.Bool("race-binary", true, "build the service under test with -race")
)

// serviceBinaryEnv hands a test binary that runs itself as a child (to
// see a test fail on purpose) the service binary its parent built.
const serviceBinaryEnv = "FAULT_SERVICE_BINARY"

func TestMain(m *testing.M) {
	flag.Parse()
	if binary = os.Getenv(serviceBinaryEnv); binary != "" {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "fault-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "payment-service")
	args := []string{"build"}
	if *raceBinary {
		args = append(args, "-race")
	}
	args = append(args, "-o", binary, "github.com/example/payment-service/cmd/payment-service")
	build := exec.Command("go", args...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// The API clients every replica knows.
const (
	clientID    = "fault-client"
	apiKey      = "fault-secret"
	otherClient = "other-client"
	otherKey    = "other-secret"
)

// Timings of every replica. The lock is as short as the configuration
// allows, so that a crashed claim is taken over within a second; the
// provider call is bounded by half of it, as the configuration demands.
const (
	lockTimeout     = time.Second
	providerTimeout = 500 * time.Millisecond
	// slowDelay makes a slow_ answer come after the service stopped
	// waiting for it.
	slowDelay = 800 * time.Millisecond
	// requestBound is the provider's request bound and the replicas'
	// PROVIDER_MAX_REQUEST_AGE: the provider refuses a request older than
	// it, so one the lossy links hold back never lands after a resumed
	// attempt called its payment FAILED.
	requestBound = 400 * time.Millisecond
)

type stackOptions struct {
	replicas int
	provider sandboxprovider.Config
	// brokers: nil starts an in-process kfake cluster (or uses
	// KAFKA_BROKERS, as every Kafka test here does).
	brokers []string
	// env is added to every replica's environment, after the defaults.
	env []string
	// previous: the replicas run the previous release (previousRelease,
	// previous_release_test.go) instead of this tree's binary.
	previous bool
	// migrateTo is the last migration applied before the replicas start;
	// 0 applies every one.
	migrateTo int64
	// webhooks, when set, makes the provider report its decisions to the
	// first replica's POST /webhooks/sandbox, through that replica's front
	// proxy (so a lossy client link loses deliveries' answers too), signed
	// with webhookSecret, which every replica holds. URL and Secret are
	// filled in by newStack.
	webhooks *sandboxprovider.WebhookConfig
	// received runs the provider in its received mode: captures, refunds
	// and voids answered 202 "received" and decided receivedDelay later,
	// receivedFailures of them failing; the replicas are told so, and look
	// a received one up a second after it (the completer runs every
	// second), which settles those whose event was lost.
	received bool
	// stripe: the replicas charge through Stripe (PAYMENT_PROVIDER=stripe)
	// instead of the sandbox: the stateful fake (internal/stripefake) in
	// this process, behind the provider link, its signed events delivered
	// to the first replica's POST /webhooks/stripe through that replica's
	// front proxy. provider, webhooks and received are then unused.
	stripe bool
	// dsn: the replicas and the checks use this database (the failover
	// suite's HAProxy in front of Patroni's members) instead of a pgtemp
	// cluster of their own.
	dsn string
}

// The received mode's timings in the suite: a modification is decided
// 100 ms after its receipt, and 15% of them fail.
const (
	receivedDelay    = 100 * time.Millisecond
	receivedFailures = 0.15
)

// webhookSecret signs the provider's deliveries in a stack with webhooks.
const webhookSecret = "whsec_fault_suite_0123456789" //nolint:gosec // G101: the fault suite's own secret

// stripeSecretKey is the API key of a stack's Stripe fake.
const stripeSecretKey = "sk_test_fault_suite" //nolint:gosec // G101: the fault suite's own secret

// stripeWebhookRetry bounds how long the Stripe fake delivers an event
// again: far beyond a test, so that an event whose replica was killed is
// delivered once it is back.
const stripeWebhookRetry = 2 * time.Minute

// stack is one system under test.
type stack struct {
	t        testing.TB
	pg       *pgtemp.Cluster
	dsn      string
	db       *pgxpool.Pool
	provider *sandboxprovider.Server
	// stripe is the Stripe fake the replicas charge through instead of
	// provider (stackOptions.stripe).
	stripe *stripefake.Server
	// ledger is the provider's books, the sandbox's or Stripe's.
	ledger ledger
	// toProvider is the link from every replica to the provider.
	toProvider *faultproxy.Proxy
	brokers    []string
	topic      string // payment events
	orderTopic string
	dltTopic   string
	replicas   []*replica
	env        []string
	logDir     string
	// received: the provider answers modifications "received"
	// (stackOptions.received).
	received bool
}

func newStack(t testing.TB, opts stackOptions) *stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := &stack{t: t, logDir: t.TempDir(), received: opts.received}

	var err error
	if opts.dsn != "" {
		s.dsn = opts.dsn
	} else {
		pg, err := pgtemp.Start(ctx, pgtemp.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pg.Stop)
		s.pg, s.dsn = pg, pg.DSN("postgres")
	}
	if opts.migrateTo == 0 {
		err = migrations.Up(ctx, s.dsn)
	} else {
		err = migrations.UpTo(ctx, s.dsn, opts.migrateTo)
	}
	if err != nil {
		t.Fatal(err)
	}
	s.db, err = pgxpool.New(ctx, s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.db.Close)

	// The replicas' addresses come first: the provider's webhooks name one.
	for i := range opts.replicas {
		r := s.newReplica(fmt.Sprintf("r%d", i))
		if opts.previous {
			r.runNext(previousRelease(t))
		}
		s.replicas = append(s.replicas, r)
	}
	upstream, providerEnv := s.startProvider(&opts)
	s.toProvider, err = faultproxy.New("tcp", strings.TrimPrefix(upstream, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.toProvider.Close)
	link := "http://" + s.toProvider.Addr()
	if opts.stripe {
		providerEnv = append(providerEnv, "STRIPE_API_BASE="+link)
	} else {
		providerEnv = append(providerEnv, "SANDBOX_PROVIDER_URL="+link)
	}

	s.brokers = opts.brokers
	if len(s.brokers) == 0 {
		s.brokers = kafkatest.Brokers(t)
	}
	s.topic = kafkatest.CreateTopic(t, s.brokers, 3)
	s.orderTopic = kafkatest.CreateTopic(t, s.brokers, 3)
	s.dltTopic = kafkatest.CreateTopic(t, s.brokers, 1)

	s.env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"GORACE=halt_on_error=0",
		"DATABASE_URL=" + s.dsn,
		"DATABASE_MAX_CONNS=16",
		"API_KEYS=" + clientID + ":" + apiKey + "," + otherClient + ":" + otherKey,
		"IDEMPOTENCY_LOCK_TIMEOUT=" + lockTimeout.String(),
		"PROVIDER_TIMEOUT=" + providerTimeout.String(),
		"PROVIDER_MAX_REQUEST_AGE=" + requestBound.String(),
		"PROVIDER_CONNECT_TIMEOUT=200ms",
		"SHUTDOWN_TIMEOUT=2s",
		// The completer runs every second and takes a claim one second
		// after its lock expired: an abandoned charge ends within seconds.
		"CHARGE_COMPLETER_CRON=* * * * * *",
		"CHARGE_COMPLETER_GRACE=1s",
		"LOG_LEVEL=warn",
		"KAFKA_BROKERS=" + strings.Join(s.brokers, ","),
		"PAYMENT_EVENTS_TOPIC=" + s.topic,
		"ORDER_EVENTS_TOPIC=" + s.orderTopic,
		"ORDER_EVENTS_DLT_TOPIC=" + s.dltTopic,
		"ORDER_CONSUMER_GROUP=fault-" + filepath.Base(s.logDir),
		"OUTBOX_POLL_INTERVAL=500ms",
		"KAFKA_CONSUMER_SESSION_TIMEOUT=6s",
		"KAFKA_CONSUMER_HEARTBEAT_INTERVAL=1s",
		"KAFKA_CONSUMER_MAX_WAIT=200ms",
	}, append(providerEnv, opts.env...)...)

	// Start them side by side: each start is a process and a readiness wait.
	var wg sync.WaitGroup
	errs := make([]error, len(s.replicas))
	for i, r := range s.replicas {
		wg.Go(func() { errs[i] = r.start() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stopAll)
	return s
}

// startProvider starts the provider the replicas charge through, the
// sandbox or the Stripe fake (opts.stripe), and returns its URL and the
// replicas' settings for it, but for the one naming its link.
func (s *stack) startProvider(opts *stackOptions) (upstream string, env []string) {
	t := s.t
	if opts.stripe {
		fake, err := stripefake.Start("127.0.0.1:0", stripefake.Config{SecretKey: stripeSecretKey, WebhookSecret: webhookSecret,
			WebhookURL: s.replicas[0].url + "/webhooks/stripe", SlowDelay: slowDelay, WebhookRetryFor: stripeWebhookRetry})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = fake.Close() })
		s.stripe, s.ledger = fake, stripeLedger{fake}
		return fake.URL, []string{"PAYMENT_PROVIDER=stripe", "STRIPE_SECRET_KEY=" + stripeSecretKey, "STRIPE_WEBHOOK_SECRET=" + webhookSecret}
	}
	if opts.provider.SlowDelay == 0 {
		opts.provider.SlowDelay = slowDelay
	}
	if opts.provider.MaxRequestAge == 0 {
		opts.provider.MaxRequestAge = requestBound
	}
	if opts.received {
		opts.provider.Modifications = sandboxprovider.ModificationsReceived
		opts.provider.ModificationDelay, opts.provider.ModificationFailureRate = receivedDelay, receivedFailures
		env = append(env, "SANDBOX_PROVIDER_MODIFICATIONS=received", "RECEIVED_LOOKUP_AFTER=1s")
	}
	if opts.webhooks != nil {
		w := *opts.webhooks
		w.URL, w.Secret = s.replicas[0].url+"/webhooks/sandbox", webhookSecret
		opts.provider.Webhooks = w
		env = append(env, "WEBHOOK_SECRETS="+webhookSecret)
	}
	var err error
	s.provider, err = sandboxprovider.Start("127.0.0.1:0", opts.provider)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.provider.Close() })
	s.ledger = sandboxLedger{s.provider}
	return s.provider.URL, env
}

// replica is one payment-service process, restartable on the same address,
// reached by clients through its front proxy.
type replica struct {
	s     *stack
	name  string
	addr  string // the process's own listener
	front *faultproxy.Proxy
	url   string // through the front proxy
	log   string // output of every run, appended

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	starts int
	// bin is the binary the next start runs: this tree's unless
	// runNext set the previous release's; ran is the one the last
	// start ran.
	bin, ran string
}

func (s *stack) newReplica(name string) *replica {
	s.t.Helper()
	addr, err := replicaAddr()
	if err != nil {
		s.t.Fatal(err)
	}
	front, err := faultproxy.New("tcp", addr)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(front.Close)
	return &replica{s: s, name: name, addr: addr, front: front, url: "http://" + front.Addr(),
		log: filepath.Join(s.logDir, name+".log")}
}

// replicaAddr picks a free loopback address for a replica, which binds it
// at every start, restarts included. A port the kernel hands out for :0
// comes from the ephemeral range (ip_local_port_range, 32768-60999 by
// default), the same range the kernel draws from for the outgoing
// connections of every process here (pools, brokers, proxies): one of them
// may take the port between two starts, and the restart fails. So the port
// is drawn below that range, at random, and checked free; a clash with
// another stack's pick is left to the check.
func replicaAddr() (string, error) {
	const lowest, count = 20000, 12000
	for range 100 {
		addr := fmt.Sprintf("127.0.0.1:%d", lowest+rand.IntN(count))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		_ = ln.Close()
		return addr, nil
	}
	return "", fmt.Errorf("no free loopback port in %d..%d", lowest, lowest+count-1)
}

// start runs the binary and waits until /readyz answers 200 (30 s at most).
// The database must be up.
func (r *replica) start() error {
	out, err := os.OpenFile(r.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	// The binary writes its log through descriptors of its own: this one
	// is never written to.
	defer func() { _ = out.Close() }()
	r.mu.Lock()
	bin := r.bin
	r.mu.Unlock()
	if bin == "" {
		bin = binary
	}
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(append([]string{}, r.s.env...), "HTTP_ADDR="+r.addr)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	r.mu.Lock()
	r.cmd, r.exited = cmd, exited
	r.starts++
	r.ran = bin
	r.mu.Unlock()

	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("replica %s exited during start-up:\n%s", r.name, r.tail(40))
		default:
		}
		if r.ready() {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("replica %s not ready within 30s:\n%s", r.name, r.tail(40))
}

// ready asks the replica's own /readyz (not through its front proxy).
func (r *replica) ready() bool {
	resp, err := http.Get("http://" + r.addr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// running reports whether the process is alive.
func (r *replica) running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.exited == nil {
		return false
	}
	select {
	case <-r.exited:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL: no shutdown, no deferred work, connections reset by
// the kernel. It returns once the process is gone.
func (r *replica) kill() {
	r.mu.Lock()
	cmd, exited := r.cmd, r.exited
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		r.s.t.Errorf("replica %s still running 10s after SIGKILL", r.name)
	}
}

func (s *stack) stopAll() {
	for _, r := range s.replicas {
		r.kill()
	}
	// A data race in the service is a failure of whichever test ran it.
	for _, r := range s.replicas {
		b, _ := os.ReadFile(r.log)
		if bytes.Contains(b, []byte("WARNING: DATA RACE")) {
			s.t.Errorf("replica %s reported a data race:\n%s", r.name, b)
		} else if s.t.Failed() {
			s.t.Logf("replica %s (%d starts), its errors other than 503s:\n%s", r.name, r.starts, r.errors(30))
		}
	}
}

// errors returns up to n error lines of the replica's log, leaving out the
// expected ones (the 503s of a fault).
func (r *replica) errors(n int) string {
	b, _ := os.ReadFile(r.log)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, `"level":"ERROR"`) && !strings.Contains(l, `"status":503`) && !strings.Contains(l, "-unavailable") && !strings.Contains(l, "outcome-unknown") {
			out = append(out, l)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return strings.Join(out, "\n")
}

func (r *replica) tail(n int) string {
	b, _ := os.ReadFile(r.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// running returns the replicas whose process is alive.
func (s *stack) running() []*replica {
	var out []*replica
	for _, r := range s.replicas {
		if r.running() {
			out = append(out, r)
		}
	}
	return out
}

// heal puts every link back to normal and every replica back up; the
// database must be up.
func (s *stack) heal() {
	s.t.Helper()
	must(s.t, s.toProvider.SetMode(faultproxy.Pass))
	s.toProvider.SetDelay(0)
	for _, r := range s.replicas {
		must(s.t, r.front.SetMode(faultproxy.Pass))
		r.front.SetDelay(0)
	}
	var wg sync.WaitGroup
	for _, r := range s.replicas {
		if !r.running() {
			wg.Go(func() {
				if err := r.start(); err != nil {
					s.t.Error(err)
				}
			})
		}
	}
	wg.Wait()
	if s.t.Failed() {
		s.t.FailNow()
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// haltDB stops PostgreSQL, keeping its data.
func (s *stack) haltDB(mode pgtemp.HaltMode) error { return s.pg.Halt(mode) }

// resumeDB starts PostgreSQL again and drops the test's own pooled
// connections, which died with the server.
func (s *stack) resumeDB(ctx context.Context) error {
	if err := s.pg.Resume(ctx); err != nil {
		return err
	}
	s.db.Reset()
	return nil
}

// addOrder puts an order into the projection, as the order consumer would.
func (s *stack) addOrder(o op) {
	s.t.Helper()
	_, err := s.db.Exec(context.Background(),
		`INSERT INTO order_projection (order_id, customer_id, amount, currency) VALUES ($1, $2, $3, 'RUB')`,
		o.order, o.customer, o.amount)
	must(s.t, err)
}

// op is one business operation of a careful client: one charge, one
// idempotency key, one external payment.
type op struct {
	key      string
	order    int64
	customer int64
	amount   string
	ext      string
	// apiKey is the client's credential; empty means the fault client.
	apiKey string
	// pm is the payment method (Stripe's pm_...) of a charge through
	// Stripe; empty for the sandbox.
	pm string
}

// provider is the payment provider the op charges through: Stripe when
// it names a payment method, the sandbox otherwise.
func (o op) provider() string {
	if o.pm != "" {
		return "stripe"
	}
	return "sandbox"
}

// call is one HTTP request of an operation: the same on every attempt, so
// that a retry is the same command under the same key.
type call struct {
	key    string
	client string // the client the bearer token authenticates
	bearer string
	path   string
	body   []byte
	refund bool // POST /payments/{id}/refunds rather than POST /payments
	// transition: POST /payments/{id}/captures or /voids, whose final
	// answers include refusals that store nothing (twostep_test.go).
	transition bool
}

// operation is what the careful client settles: a charge (op) or a
// refund (refundOp).
type operation interface {
	call() call
}

func (o op) call() call {
	body := map[string]any{
		"orderId": o.order, "customerId": o.customer, "amount": o.amount, "currency": "RUB",
		"paymentProvider": o.provider(), "externalPaymentId": o.ext,
	}
	if o.pm != "" {
		body["paymentMethod"] = o.pm
	}
	b, _ := json.Marshal(body)
	return call{key: o.key, client: o.client(), bearer: bearerOf(o.apiKey), path: "/payments", body: b}
}

// bearerOf is the credential a client sends: key, or the fault client's.
func bearerOf(key string) string {
	if key == "" {
		return apiKey
	}
	return key
}

// client is the API client the op is made by.
func (o op) client() string {
	if o.apiKey == otherKey {
		return otherClient
	}
	return clientID
}

// providerKey is the key the service charges the op under at the provider.
func (o op) providerKey() string { return o.provider() + ":" + o.ext }

// answer is one HTTP exchange as the client saw it.
type answer struct {
	replica    string
	client     string
	key        string
	status     int
	code       string // the problem's code, for errors
	body       []byte
	retryAfter string
	replayed   bool
	refund     bool  // the answer to a refund
	transition bool  // the answer to a capture or a void
	err        error // the request got no answer
}

func (a answer) String() string {
	if a.err != nil {
		return fmt.Sprintf("%s key %s: no answer: %v", a.replica, a.key, a.err)
	}
	return fmt.Sprintf("%s key %s: %d %s", a.replica, a.key, a.status, bytes.TrimSpace(a.body))
}

// final reports an answer that is the key's outcome: the stored one, or a
// refusal that stores nothing and that the client takes as its answer.
func (a answer) final() bool {
	if a.err != nil {
		return false
	}
	switch a.status {
	case http.StatusOK, http.StatusCreated, http.StatusPaymentRequired:
		return true
	case http.StatusAccepted:
		// Received by the provider, which decides later: the key's answer.
		return a.refund || a.transition
	case http.StatusUnprocessableEntity:
		return a.code == "refund-declined" || a.code == "refund-failed" ||
			(a.transition && transitionDecided[a.code])
	case http.StatusConflict:
		return a.code == "external-payment-conflict" || a.code == "order-already-paid" ||
			a.code == "external-refund-conflict" || a.code == codeRefundExceeds ||
			(a.transition && transitionRefused[a.code])
	}
	return false
}

// codeRefundExceeds is the one final answer that is not stored: the refund
// did not fit in what the payment had left, and nothing was kept for its key
// (api/openapi.yaml).
const codeRefundExceeds = "refund-exceeds-payment"

// stored reports a final answer that the key's record must hold.
func (a answer) stored() bool {
	return a.final() && a.code != codeRefundExceeds && !(a.transition && transitionRefused[a.code])
}

// retryable reports an answer that asks the client to come back with the
// same key: no answer at all, in progress, or one of the three 503s.
func (a answer) retryable() bool {
	switch {
	case a.err != nil:
		return true
	case a.status == http.StatusConflict:
		return (a.code == "request-in-progress" || (a.transition && a.code == codeTransitionInProgress)) && a.retryAfter != ""
	case a.status == http.StatusServiceUnavailable:
		return a.retryAfter != "" &&
			(a.code == "outcome-unknown" || a.code == "provider-unavailable" || a.code == "service-unavailable")
	}
	return false
}

var httpClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}}

// charge sends one POST /payments through the replica's front proxy,
// bounded by timeout.
func (r *replica) charge(o op, timeout time.Duration) answer { return r.send(o.call(), timeout) }

// send makes one attempt of c through the replica's front proxy, bounded by
// timeout.
func (r *replica) send(c call, timeout time.Duration) answer {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	a := answer{replica: r.name, client: c.client, key: c.key, refund: c.refund, transition: c.transition}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url+c.path, bytes.NewReader(c.body))
	if err != nil {
		a.err = err
		return a
	}
	// One request is one attempt: net/http would otherwise resend it by
	// itself on a broken keep-alive connection, hiding the fault.
	req.GetBody = nil
	req.Header.Set("Authorization", "Bearer "+c.bearer)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", c.key)
	resp, err := httpClient.Do(req)
	if err != nil {
		a.err = err
		return a
	}
	defer resp.Body.Close()
	a.body, a.err = io.ReadAll(resp.Body)
	if a.err != nil {
		return a
	}
	a.status = resp.StatusCode
	a.retryAfter = resp.Header.Get("Retry-After")
	a.replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	if resp.StatusCode >= 400 {
		var p struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(a.body, &p)
		a.code = p.Code
	}
	return a
}

// settle is the careful client: it sends the operation again and again
// with the same key and body, to whichever replica is up, until the answer
// is final. It polls every 20 ms rather than waiting out Retry-After, which
// makes it a harsher client than a polite one, and fails the test if no
// final answer comes before the deadline. Every answer it saw is returned,
// the final one last.
func (s *stack) settle(o operation, within time.Duration) []answer {
	s.t.Helper()
	c := o.call()
	var seen []answer
	deadline := time.Now().Add(within)
	for i := 0; time.Now().Before(deadline); i++ {
		up := s.servingFor(c)
		if len(up) == 0 {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		a := up[i%len(up)].send(c, 3*time.Second)
		seen = append(seen, a)
		if a.final() {
			return seen
		}
		if !a.retryable() {
			s.t.Errorf("op %s: answer neither final nor retryable: %s", c.key, a)
			return seen
		}
		time.Sleep(20 * time.Millisecond)
	}
	last := "none"
	if len(seen) > 0 {
		last = seen[len(seen)-1].String()
	}
	s.t.Errorf("op %s: no final answer within %s after %d attempts; last: %s", c.key, within, len(seen), last)
	return seen
}

// settleAll settles ops with the careful client, workers of them at a time,
// and returns every answer seen.
func (s *stack) settleAll(ops []op, workers int, within time.Duration) []answer {
	s.t.Helper()
	var (
		mu      sync.Mutex
		answers []answer
		wg      sync.WaitGroup
		next    = make(chan op)
	)
	for range workers {
		wg.Go(func() {
			for o := range next {
				seen := s.settle(o, within)
				mu.Lock()
				answers = append(answers, seen...)
				mu.Unlock()
			}
		})
	}
	for _, o := range ops {
		next <- o
	}
	close(next)
	wg.Wait()
	return answers
}

// keysOf returns the operations' idempotency keys.
func keysOf[O operation](items []O) []string {
	keys := make([]string, len(items))
	for i, o := range items {
		keys[i] = o.call().key
	}
	return keys
}

// waitFor polls cond every 20 ms until it holds or the deadline passes.
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// count runs a count query on the database.
func (s *stack) count(query string, args ...any) int {
	s.t.Helper()
	var n int
	must(s.t, s.db.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}
