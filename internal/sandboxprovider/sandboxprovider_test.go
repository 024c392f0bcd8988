package sandboxprovider_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/example/payment-service/internal/sandboxprovider"
)

func start(t *testing.T, cfg sandboxprovider.Config) *sandboxprovider.Server {
	t.Helper()
	s, err := sandboxprovider.Start("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

type answer struct {
	status   int
	replayed bool
	body     string
	err      error // transport error: no answer at all
}

func create(t *testing.T, s *sandboxprovider.Server, key, amount, ref string, timeout time.Duration) answer {
	t.Helper()
	body := `{"amount":"` + amount + `","currency":"RUB","reference":"` + ref + `"}`
	req, err := http.NewRequest(http.MethodPost, s.URL+"/v1/charges", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.GetBody = nil // or net/http resends it by itself after a dropped connection
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: timeout}).Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true", body: string(b), err: err}
}

func errorType(t *testing.T, a answer) (string, *bool) {
	t.Helper()
	var e sandboxprovider.ErrorBody
	if err := json.Unmarshal([]byte(a.body), &e); err != nil {
		t.Fatalf("error body %q: %v", a.body, err)
	}
	return e.Error.Type, e.Error.Charged
}

// The idempotency promises: same key and parameters replay and charge
// nothing new; other parameters are refused; the ledger over HTTP agrees.
func TestOneKeyIsOneCharge(t *testing.T) {
	t.Parallel()
	s := start(t, sandboxprovider.Config{})

	first := create(t, s, "k1", "100.50", "pi_1", 5*time.Second)
	if first.status != http.StatusOK || first.replayed || !strings.Contains(first.body, `"status":"succeeded"`) {
		t.Fatalf("first: %+v", first)
	}
	again := create(t, s, "k1", "100.5", "pi_1", 5*time.Second) // the same amount, written otherwise
	if again.status != http.StatusOK || !again.replayed || again.body != first.body {
		t.Fatalf("replay: %+v, want the first answer, replayed", again)
	}
	other := create(t, s, "k1", "999.00", "pi_1", 5*time.Second)
	if typ, _ := errorType(t, other); other.status != http.StatusUnprocessableEntity || typ != sandboxprovider.ErrTypeKeyReused {
		t.Fatalf("other amount under the key: %+v, want 422 %s", other, sandboxprovider.ErrTypeKeyReused)
	}
	declined := create(t, s, "k2", "5", "decline_1", 5*time.Second)
	if declined.status != http.StatusOK || !strings.Contains(declined.body, `"status":"declined"`) {
		t.Fatalf("decline: %+v", declined)
	}

	ledger, err := sandboxprovider.FetchLedger(context.Background(), s.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := ledger.Counters
	if c.Charges != 1 || c.Declines != 1 || c.Replays != 1 || c.ParamConflicts != 1 || c.Requests != 4 {
		t.Fatalf("counters = %+v", c)
	}
	if got := ledger.Succeeded("pi_1"); len(got) != 1 || got[0].Amount.String() != "100.5" || got[0].Requests != 2 {
		t.Fatalf("charges for pi_1 = %+v", got)
	}
	if len(ledger.Charges) != 2 {
		t.Fatalf("ledger has %d charges, want 2", len(ledger.Charges))
	}
	if _, ok := s.Lookup("k1"); !ok {
		t.Fatal("lookup of a charged key found nothing")
	}
}

// A second request while the first is processed is refused as in progress,
// and charges nothing.
func TestSameKeyWhileProcessingIsInProgress(t *testing.T) {
	t.Parallel()
	s := start(t, sandboxprovider.Config{Latency: 500 * time.Millisecond})
	var wg sync.WaitGroup
	var first answer
	wg.Go(func() { first = create(t, s, "k", "1", "pi_x", 5*time.Second) })
	deadline := time.Now().Add(5 * time.Second)
	for s.Ledger().Counters.Requests == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	second := create(t, s, "k", "1", "pi_x", 5*time.Second)
	wg.Wait()
	if typ, _ := errorType(t, second); second.status != http.StatusConflict || typ != sandboxprovider.ErrTypeInProgress {
		t.Fatalf("second: %+v, want 409 in progress", second)
	}
	if first.status != http.StatusOK {
		t.Fatalf("first: %+v", first)
	}
	if c := s.Ledger().Counters; c.Charges != 1 || c.InProgressRefusals != 1 {
		t.Fatalf("counters = %+v", c)
	}
}

// Each prefix fault does what the package documentation says, to the first
// request of a key; the retry gets the charge, made once.
func TestPrefixFaults(t *testing.T) {
	t.Parallel()
	s := start(t, sandboxprovider.Config{SlowDelay: 2 * time.Second})
	tests := []struct {
		ref         string
		check       func(a answer) bool
		chargedOnce bool // after the first request
		retryOK     bool // the retry with the same key answers 200
	}{
		{"fail_1", func(a answer) bool {
			typ, charged := errorType(t, a)
			return a.status == http.StatusServiceUnavailable && typ == sandboxprovider.ErrTypeUnavailable && charged != nil && !*charged
		}, false, false},
		{"drop_1", func(a answer) bool { return a.err != nil }, true, true},
		{"gw502_1", func(a answer) bool { return a.status == http.StatusBadGateway }, true, true},
		{"slow_1", func(a answer) bool {
			var ne interface{ Timeout() bool }
			return errors.As(a.err, &ne) && ne.Timeout()
		}, true, true},
		{"busy_1", func(a answer) bool {
			typ, _ := errorType(t, a)
			return a.status == http.StatusConflict && typ == sandboxprovider.ErrTypeInProgress
		}, false, true},
		{"refuse_1", refusedForGood(t), false, false},
		{"busyrefuse_1", func(a answer) bool {
			typ, _ := errorType(t, a)
			return a.status == http.StatusConflict && typ == sandboxprovider.ErrTypeInProgress
		}, false, false},
		{"droprefuse_1", func(a answer) bool { return a.err != nil }, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.ref, func(t *testing.T) {
			key := "key-" + tc.ref
			first := create(t, s, key, "10.00", tc.ref, 500*time.Millisecond)
			if !tc.check(first) {
				t.Fatalf("first request: %+v", first)
			}
			if _, charged := s.Lookup(key); charged != tc.chargedOnce {
				t.Fatalf("charged after the first request = %v, want %v", charged, tc.chargedOnce)
			}
			retry := create(t, s, key, "10.00", tc.ref, 5*time.Second)
			if ok := retry.status == http.StatusOK; ok != tc.retryOK {
				t.Fatalf("retry: %+v, want 200 = %v", retry, tc.retryOK)
			}
			if !tc.retryOK && !refusedForGood(t)(retry) && tc.ref != "fail_1" {
				t.Fatalf("retry of %s: %+v, want 422 with charged false", tc.ref, retry)
			}
			if n := len(s.Ledger().Succeeded(tc.ref)); n != btoi(tc.retryOK || tc.chargedOnce) {
				t.Fatalf("succeeded charges for %s = %d", tc.ref, n)
			}
		})
	}
}

// refusedForGood checks a permanent refusal: 422 invalid_request, saying
// nothing was charged.
func refusedForGood(t *testing.T) func(a answer) bool {
	return func(a answer) bool {
		typ, charged := errorType(t, a)
		return a.status == http.StatusUnprocessableEntity && typ == sandboxprovider.ErrTypeInvalidRequest && charged != nil && !*charged
	}
}

// The lookup by key tells the three states apart: no charge (404), a
// request still being processed (409: it may yet charge, so it is not
// "none"), and the decided charge (200).
func TestLookupByKey(t *testing.T) {
	t.Parallel()
	s := start(t, sandboxprovider.Config{Latency: 500 * time.Millisecond})
	lookup := func(key string) int {
		t.Helper()
		resp, err := http.Get(s.URL + "/v1/charges?idempotency_key=" + key)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := lookup("k"); got != http.StatusNotFound {
		t.Fatalf("before any request: %d, want 404", got)
	}
	var wg sync.WaitGroup
	wg.Go(func() { create(t, s, "k", "1", "pi_x", 5*time.Second) })
	deadline := time.Now().Add(5 * time.Second)
	for s.Ledger().Counters.Requests == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := lookup("k"); got != http.StatusConflict {
		t.Fatalf("while processing: %d, want 409", got)
	}
	wg.Wait()
	if got := lookup("k"); got != http.StatusOK {
		t.Fatalf("after the charge: %d, want 200", got)
	}
	create(t, s, "r", "1", "refuse_x", 5*time.Second)
	if got := lookup("r"); got != http.StatusNotFound {
		t.Fatalf("after a refusal: %d, want 404", got)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Random faults are reproducible from the seed, and never charge a key twice.
func TestSeededFaultsAreReproducible(t *testing.T) {
	t.Parallel()
	rates := map[sandboxprovider.Fault]float64{sandboxprovider.FaultDrop: 0.3, sandboxprovider.FaultNotCharged: 0.3}
	run := func() (sandboxprovider.Counters, int) {
		s := start(t, sandboxprovider.Config{FaultRates: rates, Seed: 42})
		for i := range 40 {
			key := "k" + string(rune('a'+i%20)) // every key twice
			create(t, s, key, "1", "pi_"+key, 2*time.Second)
		}
		l := s.Ledger()
		return l.Counters, len(l.Charges)
	}
	c1, n1 := run()
	c2, n2 := run()
	if c1.Faults[sandboxprovider.FaultDrop] != c2.Faults[sandboxprovider.FaultDrop] ||
		c1.Faults[sandboxprovider.FaultNotCharged] != c2.Faults[sandboxprovider.FaultNotCharged] || n1 != n2 {
		t.Fatalf("two runs with seed 42 differ: %+v (%d charges) vs %+v (%d)", c1, n1, c2, n2)
	}
	if c1.Faults[sandboxprovider.FaultDrop] == 0 || c1.Faults[sandboxprovider.FaultNotCharged] == 0 {
		t.Fatalf("no faults drawn at 30%% each: %+v", c1)
	}
	if c1.Charges != n1 || n1 > 20 {
		t.Fatalf("charges %d for %d ledger entries over 20 keys", c1.Charges, n1)
	}
}

func TestFaultRatesFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env     map[string]string
		wantErr string
	}{
		{map[string]string{"SANDBOX_FAULT_RATES": "drop=0.1,busy=0.2", "SANDBOX_FAULT_SEED": "7", "SANDBOX_LATENCY": "5ms"}, ""},
		{map[string]string{"SANDBOX_FAULT_RATES": "drop=0.7,busy=0.7"}, "SANDBOX_FAULT_RATES"},
		{map[string]string{"SANDBOX_FAULT_RATES": "explode=0.1"}, "SANDBOX_FAULT_RATES"},
		{map[string]string{"SANDBOX_LATENCY": "soon"}, "SANDBOX_LATENCY"},
		{map[string]string{"SANDBOX_FAULT_SEED": "-1"}, "SANDBOX_FAULT_SEED"},
	}
	for _, tc := range tests {
		cfg, err := sandboxprovider.ConfigFromEnv(func(k string) string { return tc.env[k] })
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%v: %v", tc.env, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%v: err %v, want one naming %s", tc.env, err, tc.wantErr)
		case tc.wantErr == "" && (cfg.Seed != 7 || cfg.FaultRates[sandboxprovider.FaultBusy] != 0.2 || cfg.Latency != 5*time.Millisecond):
			t.Errorf("%v: parsed %+v", tc.env, cfg)
		}
	}
}
