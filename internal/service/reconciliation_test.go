package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/config"
	"github.com/example/payment-service/internal/provider/payoutreport"
	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/service"
	"github.com/example/payment-service/internal/servicetest"
	"github.com/example/payment-service/internal/stripefake"
	"github.com/example/payment-service/internal/testdb"
)

// Reconciliation end to end: the real service over real PostgreSQL,
// charging through the real sandbox over HTTP, a day of payments made
// through the API, faults made at the provider by its test hooks, and
// runs of `payment-service reconcile` (service.Reconcile) over the day.

// reconEnv runs the service with nothing that settles a lost answer on
// its own (no webhooks: the sandbox sends none unless told; the
// completer's schedule once a year), no scheduled reconciliation, and the
// contract's fee the sandbox keeps.
var reconEnv = map[string]string{
	"OPERATOR_CLIENTS":         "demo-client",
	"RECONCILE_CRON":           "off",
	"CHARGE_COMPLETER_CRON":    "0 0 0 1 1 *",
	"CHARGE_COMPLETER_GRACE":   "0s",
	"IDEMPOTENCY_LOCK_TIMEOUT": "4s",
	"PROVIDER_TIMEOUT":         "2s",
	"RECONCILE_SETTLEMENT_LAG": "0s",
	"RECONCILE_MARGIN":         "1m",
	"RECONCILE_PENDING_BOUND":  "1s",
	"RECONCILE_FEE_PERCENT":    "2.9",
	"RECONCILE_FEE_FIXED":      "0.30",
}

var sandboxFees = sandboxprovider.BalanceConfig{FeePercent: decimal.RequireFromString("2.9"), FeeFixed: decimal.RequireFromString("0.30")}

// recon is a service and its sandbox, with what a test made.
type recon struct {
	*servicetest.Service
	cfg   config.Config
	from  time.Time // the day's window starts here
	order int64
	// provider and method are what a charge names: the sandbox, or
	// Stripe with a payment method of its fake's.
	provider, method string
}

func startRecon(t *testing.T, env map[string]string) *recon {
	t.Helper()
	vars := map[string]string{}
	for k, v := range reconEnv {
		vars[k] = v
	}
	for k, v := range env {
		vars[k] = v
	}
	svc := servicetest.Start(t, servicetest.Options{DSN: testdb.New(t), Env: vars,
		Provider: sandboxprovider.Config{Balance: sandboxFees}})
	cfg, err := config.Load(func(k string) string { return svc.Env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return &recon{Service: svc, cfg: cfg, from: time.Now().Add(-time.Minute).UTC(), order: 1000, provider: "sandbox"}
}

// run reconciles the window from r.from to now, as the scheduled job does.
func (r *recon) run(t *testing.T) app.ReconciliationRun {
	t.Helper()
	run, err := service.Reconcile(context.Background(), r.cfg, slog.New(slog.DiscardHandler), r.from, time.Now().UTC(), nil)
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return run
}

// call sends an API request as the operator's client and decodes the
// answer into out (when not nil); it returns the status.
func (r *recon) call(t *testing.T, method, path, key, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, r.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer demo-secret")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return resp.StatusCode
}

// charge makes a payment of amount for a new order; manual authorizes.
func (r *recon) charge(t *testing.T, external, amount string, manual bool, want int) int64 {
	t.Helper()
	r.order++
	if _, err := r.DB.Exec(context.Background(),
		`INSERT INTO order_projection (order_id, customer_id, amount, currency) VALUES ($1, 42, $2, 'RUB')`, r.order, amount); err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"orderId":%d,"customerId":42,"amount":%q,"currency":"RUB","paymentProvider":%q,"externalPaymentId":%q`,
		r.order, amount, r.provider, external)
	if manual {
		body += `,"captureMethod":"manual"`
	}
	if r.method != "" {
		method := r.method
		if strings.HasPrefix(external, "decline_") {
			method = stripefake.PMDeclined
		}
		body += `,"paymentMethod":"` + method + `"`
	}
	var p struct {
		ID int64 `json:"id"`
	}
	if got := r.call(t, http.MethodPost, "/payments", "k-"+external, body+"}", &p); got != want {
		t.Fatalf("charge %s: %d, want %d", external, got, want)
	}
	return p.ID
}

func (r *recon) refund(t *testing.T, payment int64, external, amount string) {
	t.Helper()
	if got := r.call(t, http.MethodPost, fmt.Sprintf("/payments/%d/refunds", payment), "k-"+external,
		fmt.Sprintf(`{"amount":%q,"externalRefundId":%q}`, amount, external), nil); got != http.StatusCreated {
		t.Fatalf("refund %s: %d", external, got)
	}
}

func (r *recon) capture(t *testing.T, payment int64, external, amount string) {
	t.Helper()
	if got := r.call(t, http.MethodPost, fmt.Sprintf("/payments/%d/captures", payment), "k-"+external,
		fmt.Sprintf(`{"amount":%q,"currency":"RUB","externalCaptureId":%q}`, amount, external), nil); got != http.StatusOK && got != http.StatusCreated {
		t.Fatalf("capture %s: %d", external, got)
	}
}

func (r *recon) void(t *testing.T, payment int64) {
	t.Helper()
	if got := r.call(t, http.MethodPost, fmt.Sprintf("/payments/%d/voids", payment), fmt.Sprintf("k-void-%d", payment), "", nil); got != http.StatusOK && got != http.StatusCreated {
		t.Fatalf("void of %d: %d", payment, got)
	}
}

// cleanDay makes n of each kind of operation, all settled normally: a
// charge, a charge refunded in part and one in full, a declined charge,
// an authorization captured in full, one captured in part and then
// refunded in part, one voided; and pays out half of it.
func (r *recon) cleanDay(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		r.charge(t, fmt.Sprintf("pi_clean_%d", i), "100.00", false, http.StatusCreated)
		refunded := r.charge(t, fmt.Sprintf("pi_refunded_%d", i), "80.00", false, http.StatusCreated)
		r.refund(t, refunded, fmt.Sprintf("re_part_%d", i), "30.00")
		r.refund(t, refunded, fmt.Sprintf("re_rest_%d", i), "50.00")
		r.charge(t, fmt.Sprintf("decline_%d", i), "10.00", false, http.StatusPaymentRequired)
		full := r.charge(t, fmt.Sprintf("pi_held_%d", i), "60.00", true, http.StatusCreated)
		r.capture(t, full, fmt.Sprintf("cp_full_%d", i), "60.00")
		part := r.charge(t, fmt.Sprintf("pi_part_%d", i), "50.00", true, http.StatusCreated)
		r.capture(t, part, fmt.Sprintf("cp_part_%d", i), "35.50")
		r.refund(t, part, fmt.Sprintf("re_capture_%d", i), "5.25")
		voided := r.charge(t, fmt.Sprintf("pi_voided_%d", i), "20.00", true, http.StatusCreated)
		r.void(t, voided)
		if i == n/2 {
			r.payOut()
		}
	}
}

// items are the items the API lists with the query, all pages.
func (r *recon) items(t *testing.T, query string) []item {
	t.Helper()
	var all []item
	after := int64(0)
	for {
		var page struct {
			Items     []item `json:"items"`
			NextAfter int64  `json:"nextAfter"`
		}
		path := "/reconciliation/items?limit=1000" + query
		if after > 0 {
			path += "&after=" + strconv.FormatInt(after, 10)
		}
		if got := r.call(t, http.MethodGet, path, "", "", &page); got != http.StatusOK {
			t.Fatalf("GET /reconciliation/items%s: %d", query, got)
		}
		all = append(all, page.Items...)
		if page.NextAfter == 0 {
			return all
		}
		after = page.NextAfter
	}
}

type item struct {
	ID         int64  `json:"id"`
	Key        string `json:"key"`
	Class      string `json:"class"`
	Status     string `json:"status"`
	PaymentID  int64  `json:"paymentId"`
	ProviderID string `json:"providerId"`
	Detail     string `json:"detail"`
}

func classes(items []item) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.Class)
	}
	slices.Sort(out)
	return out
}

// A clean day, every charge, refund, capture and void settled normally,
// fees as the contract says, half of it paid out: reconciled to no item.
func TestReconcileACleanDayFindsNothing(t *testing.T) {
	t.Parallel()
	r := startRecon(t, nil)
	r.cleanDay(t, 6)
	run := r.run(t)
	if run.Found != 0 || run.Expected != 0 || len(r.items(t, "&status=all")) != 0 {
		t.Fatalf("a clean day: %+v, items %+v", run, r.items(t, "&status=all"))
	}
	// Matched: 6 x (charge, refunded charge and its 2 refunds, 2 captures
	// and the refund of one); a decline and a void move nothing.
	if run.Matched != 6*7 || run.Payouts != 1 {
		t.Fatalf("a clean day: %d matched, %d payouts; want %d and 1: %+v", run.Matched, run.Payouts, 6*7, run)
	}
}

// Each fault made at the provider (or a lost answer, or a stuck record)
// beside a clean day yields exactly its class, and nothing else.
func TestReconcileFindsEachFaultAsItsClass(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fault func(t *testing.T, r *recon)
		want  string
	}{
		{"a lost answer, the completer and webhooks off", func(t *testing.T, r *recon) {
			r.charge(t, "drop_lost", "70.00", false, http.StatusServiceUnavailable)
		}, "missing_in_service"},
		{"a refund made at the provider only", func(t *testing.T, r *recon) {
			r.charge(t, "pi_dashboard", "40.00", false, http.StatusCreated)
			if _, err := r.Provider.RefundOutside("sandbox:pi_dashboard", decimal.RequireFromString("15.00")); err != nil {
				t.Fatal(err)
			}
		}, "missing_in_service"},
		{"an amount the provider changed", func(t *testing.T, r *recon) {
			r.charge(t, "pi_changed", "40.00", false, http.StatusCreated)
			if _, err := r.Provider.ChangeAmount(lastTransaction(t, r).ID, decimal.RequireFromString("44.00")); err != nil {
				t.Fatal(err)
			}
		}, "amount_differs"},
		{"a duplicate movement", func(t *testing.T, r *recon) {
			r.charge(t, "pi_twice", "40.00", false, http.StatusCreated)
			if _, err := r.Provider.Duplicate(lastTransaction(t, r).ID); err != nil {
				t.Fatal(err)
			}
		}, "moved_twice"},
		{"a stuck PENDING record", func(t *testing.T, r *recon) {
			// Refused as in progress: nothing charged, the payment left
			// PENDING, its outcome unknown.
			r.charge(t, "busy_stuck", "40.00", false, http.StatusServiceUnavailable)
			time.Sleep(1100 * time.Millisecond) // RECONCILE_PENDING_BOUND
		}, "pending_too_long"},
		{"a batch that does not add up", func(t *testing.T, r *recon) {
			r.charge(t, "pi_batch", "40.00", false, http.StatusCreated)
			payouts := r.Provider.PayOut()
			if len(payouts) != 1 {
				t.Fatalf("payouts %+v", payouts)
			}
			if _, err := r.Provider.ChangePayout(payouts[0].ID, payouts[0].Amount.Add(decimal.RequireFromString("0.01"))); err != nil {
				t.Fatal(err)
			}
		}, "batch_unbalanced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := startRecon(t, nil)
			r.cleanDay(t, 1)
			tc.fault(t, r)
			run := r.run(t)
			found := r.items(t, "")
			if got := classes(found); !slices.Equal(got, []string{tc.want}) || run.Found != 1 || run.Opened != 1 {
				t.Fatalf("found %v (run %+v), want [%s]: %+v", got, run, tc.want, found)
			}
		})
	}
}

func lastTransaction(t *testing.T, r *recon) sandboxprovider.BalanceTransaction {
	t.Helper()
	all := r.Provider.BalanceTransactions()
	if len(all) == 0 {
		t.Fatal("no balance transaction")
	}
	return all[len(all)-1]
}

// A lost answer is found by the first run, which hands it to the
// completer: its lookup records the charge, and the next run closes the
// item. Nothing else is found, before or after.
func TestReconcileClosesALostAnswerTheCompleterSettled(t *testing.T) {
	t.Parallel()
	r := startRecon(t, nil)
	r.cleanDay(t, 1)
	r.charge(t, "drop_settled", "70.00", false, http.StatusServiceUnavailable)
	r.awaitLocksExpired(t)
	first := r.run(t)
	open := r.items(t, "")
	if got := classes(open); !slices.Equal(got, []string{"missing_in_service"}) || first.Lookups != 1 {
		t.Fatalf("first run: %v, %d lookups, want [missing_in_service] and 1", got, first.Lookups)
	}
	if n := r.Count(t, `SELECT count(*) FROM payment WHERE external_payment_id = 'drop_settled' AND status = 'SUCCEEDED'`); n != 1 {
		t.Fatalf("the completer did not settle the lost answer the run handed it")
	}
	second := r.run(t)
	closed := r.items(t, "&status=closed")
	if second.Found != 0 || second.Closed != 1 || len(r.items(t, "")) != 0 ||
		len(closed) != 1 || closed[0].Key != open[0].Key {
		t.Fatalf("second run %+v: closed %+v, want the first run's item", second, closed)
	}
}

// awaitLocksExpired waits until no claim's lock is live: the completer
// takes only an abandoned claim.
func (r *recon) awaitLocksExpired(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.Count(t, `SELECT count(*) FROM idempotency_record WHERE status = 'IN_PROGRESS' AND locked_until > clock_timestamp()`) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("a claim's lock is still live after 10s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// faultyDay is a clean day with three faults that stay: an amount
// changed, a movement twice, a payout that does not add up.
func (r *recon) faultyDay(t *testing.T) {
	t.Helper()
	r.cleanDay(t, 2)
	r.charge(t, "pi_changed", "40.00", false, http.StatusCreated)
	if _, err := r.Provider.ChangeAmount(lastTransaction(t, r).ID, decimal.RequireFromString("44.00")); err != nil {
		t.Fatal(err)
	}
	r.charge(t, "pi_twice", "40.00", false, http.StatusCreated)
	if _, err := r.Provider.Duplicate(lastTransaction(t, r).ID); err != nil {
		t.Fatal(err)
	}
	payouts := r.Provider.PayOut()
	if _, err := r.Provider.ChangePayout(payouts[0].ID, decimal.RequireFromString("1.00")); err != nil {
		t.Fatal(err)
	}
}

var faultyDayClasses = []string{"amount_differs", "batch_unbalanced", "moved_twice"}

// The same window run again, twice at once (two replicas, each its own
// pool), and after a run killed with SIGKILL in the middle of keeping
// its items: the same items every time, none twice.
func TestReconcileRerunsConcurrentRunsAndAKilledRunLeaveTheSameItems(t *testing.T) {
	t.Parallel()
	r := startRecon(t, nil)
	r.faultyDay(t)
	to := time.Now().UTC()
	window := func(t *testing.T) app.ReconciliationRun {
		t.Helper()
		run, err := service.Reconcile(context.Background(), r.cfg, slog.New(slog.DiscardHandler), r.from, to, nil)
		if err != nil {
			t.Fatal(err)
		}
		return run
	}
	keys := func() []string {
		var out []string
		for _, it := range r.items(t, "&status=all") {
			out = append(out, it.Key)
		}
		slices.Sort(out)
		return out
	}

	first := window(t)
	want := keys()
	if got := classes(r.items(t, "")); !slices.Equal(got, faultyDayClasses) || first.Opened != 3 {
		t.Fatalf("first run: %v (%+v), want %v", got, first, faultyDayClasses)
	}

	again := window(t)
	if got := keys(); !slices.Equal(got, want) || again.Found != 3 || again.Opened != 0 || again.Closed != 0 {
		t.Fatalf("the window again: %v (%+v), want %v, none opened or closed", got, again, want)
	}

	done := make(chan app.ReconciliationRun, 2)
	for range 2 {
		go func() {
			run, err := service.Reconcile(context.Background(), r.cfg, slog.New(slog.DiscardHandler), r.from, to, nil)
			if err != nil {
				t.Error(err)
			}
			done <- run
		}()
	}
	<-done
	<-done
	if got := keys(); !slices.Equal(got, want) {
		t.Fatalf("after two runs at once: %v, want %v", got, want)
	}

	// A run killed while it waits for the runs' lock inside its
	// transaction, its books read: nothing of it is kept.
	runsBefore := r.Count(t, `SELECT count(*) FROM reconciliation_run`)
	r.killRunMidway(t, to)
	if got := keys(); !slices.Equal(got, want) || r.Count(t, `SELECT count(*) FROM reconciliation_run`) != runsBefore {
		t.Fatalf("after a killed run: %v and %d runs, want %v and %d", got, r.Count(t, `SELECT count(*) FROM reconciliation_run`), want, runsBefore)
	}
	last := window(t)
	if got := keys(); !slices.Equal(got, want) || last.Found != 3 || last.Opened != 0 {
		t.Fatalf("after a killed run and another: %v (%+v), want %v", got, last, want)
	}
	if n := r.Count(t, `SELECT count(*) FROM reconciliation_item`); n != len(want) {
		t.Fatalf("%d item rows for %d keys", n, len(want))
	}
}

// reconcileLockKey is the advisory lock a run's transaction takes before
// it writes (internal/repository's reconcileLockKey).
const reconcileLockKey int64 = 0x7265636f6e63696c

// killRunMidway runs a reconciliation of [r.from, to) in a child copy of
// this test binary (reconcileChild), holds the runs' lock so the child
// stops inside its transaction, with both books read, and kills it with
// SIGKILL there.
func (r *recon) killRunMidway(t *testing.T, to time.Time) {
	t.Helper()
	ctx := context.Background()
	holder, err := r.DB.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, reconcileLockKey); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = holder.Exec(ctx, `SELECT pg_advisory_unlock($1)`, reconcileLockKey) }()

	cmd := exec.Command(os.Args[0], "-test.run", "^$") //nolint:gosec // G702: this test binary, run again as the child
	cmd.Env = append(os.Environ(), "RECONCILE_CHILD=1",
		"RECONCILE_CHILD_FROM="+r.from.Format(time.RFC3339Nano), "RECONCILE_CHILD_TO="+to.Format(time.RFC3339Nano))
	for k, v := range r.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for r.Count(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`) == 0 {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatal("the child's run never reached the runs' lock")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

// reconcileChild is the child of killRunMidway: when this binary runs as
// one, it runs a reconciliation of the window its environment names and
// exits; it reports whether it was one.
func reconcileChild() bool {
	if os.Getenv("RECONCILE_CHILD") != "1" {
		return false
	}
	cfg, err := config.Load(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	from, err1 := time.Parse(time.RFC3339Nano, os.Getenv("RECONCILE_CHILD_FROM"))
	to, err2 := time.Parse(time.RFC3339Nano, os.Getenv("RECONCILE_CHILD_TO"))
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, err1, err2)
		os.Exit(2)
	}
	if _, err := service.Reconcile(context.Background(), cfg, slog.New(slog.DiscardHandler), from, to, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}

// The sandbox's itemized payout reconciliation report, downloaded and fed
// to a run, finds what its API finds.
func TestReconcileFromTheProvidersReport(t *testing.T) {
	t.Parallel()
	r := startRecon(t, nil)
	r.faultyDay(t)
	to := time.Now().UTC()
	q := url.Values{"created[gte]": {r.from.Add(-r.cfg.Reconciliation.Margin).Format(time.RFC3339Nano)}, "created[lt]": {to.Format(time.RFC3339Nano)}}
	resp, err := http.Get(r.Provider.URL + "/v1/reports/payout_reconciliation.csv?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	books, err := payoutreport.Parse(resp.Body, payoutreport.Options{Account: sandboxprovider.DefaultAccount})
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	run, err := service.Reconcile(context.Background(), r.cfg, slog.New(slog.DiscardHandler), r.from, to, payoutreport.Ledger{Report: books})
	if err != nil {
		t.Fatal(err)
	}
	if got := classes(r.items(t, "")); !slices.Equal(got, faultyDayClasses) || run.Found != 3 {
		t.Fatalf("from the report: %v (%+v), want %v", got, run, faultyDayClasses)
	}
	api := r.run(t)
	if api.Found != 3 || api.Opened != 0 || api.Closed != 0 || api.Matched != run.Matched {
		t.Fatalf("from the API after the report: %+v; the report's run %+v", api, run)
	}
}

// payOut pays out what the provider has not paid out yet.
func (r *recon) payOut() {
	if r.Stripe != nil {
		r.Stripe.PayOut()
		return
	}
	r.Provider.PayOut()
}

// Against Stripe (its stateful fake, its balance read by the Stripe
// adapter, our references in metadata): a clean day with Stripe's fee
// reconciles to nothing; a lost answer and a refund made in Stripe's
// Dashboard (no metadata of ours) are each found as missing_in_service.
func TestReconcileAgainstStripe(t *testing.T) {
	t.Parallel()
	vars := map[string]string{}
	for k, v := range reconEnv {
		vars[k] = v
	}
	svc := servicetest.Start(t, servicetest.Options{DSN: testdb.New(t), Env: vars, Stripe: &servicetest.StripeOptions{
		Fake: stripefake.Config{FeeBasisPoints: 290, FeeFixed: 30}, NoWebhooks: true}})
	cfg, err := config.Load(func(k string) string { return svc.Env[k] })
	if err != nil {
		t.Fatal(err)
	}
	r := &recon{Service: svc, cfg: cfg, from: time.Now().Add(-time.Minute).UTC(), order: 1000, provider: "stripe", method: stripefake.PMVisa}
	r.cleanDay(t, 2)
	clean := r.run(t)
	if clean.Found != 0 || clean.Matched != 2*7 || clean.Payouts != 1 {
		t.Fatalf("a clean day at Stripe: %+v, items %+v", clean, r.items(t, "&status=all"))
	}

	r.Stripe.FailNext("stripe:pi_lost", stripefake.FaultDrop)
	r.charge(t, "pi_lost", "70.00", false, http.StatusServiceUnavailable)
	dashboard := r.charge(t, "pi_dashboard", "40.00", false, http.StatusCreated)
	intent, ok := r.Stripe.PaymentIntentByMetadata("provider_key", "stripe:pi_dashboard")
	if !ok {
		t.Fatalf("no PaymentIntent of payment %d", dashboard)
	}
	req, _ := http.NewRequest(http.MethodPost, r.Stripe.URL+"/v1/refunds", strings.NewReader(url.Values{"payment_intent": {intent.ID}, "amount": {"1500"}}.Encode()))
	req.Header.Set("Authorization", "Bearer "+servicetest.StripeSecretKey)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a refund in the Dashboard: %d", resp.StatusCode)
	}
	r.awaitLocksExpired(t)
	run := r.run(t)
	found := r.items(t, "")
	if got := classes(found); !slices.Equal(got, []string{"missing_in_service", "missing_in_service"}) || run.Lookups != 1 {
		t.Fatalf("found %v (%+v), want a lost answer and a Dashboard's refund: %+v", got, run, found)
	}
	after := r.run(t)
	if after.Closed != 1 || len(r.items(t, "")) != 1 {
		t.Fatalf("after the completer's lookup: %+v, open %+v; want the lost answer's item closed", after, r.items(t, ""))
	}
}
