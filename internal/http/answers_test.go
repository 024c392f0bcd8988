package http_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/example/payment-service/internal/faultproxy"
	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/servicetest"
	"github.com/example/payment-service/internal/testdb"
)

// Every answer is true, and as soon as it is known: a live request whose
// call brings no answer in time, while the provider's event has already
// recorded the decision under its claim, answers the stored response, not
// "unknown". Two ways the answer is late: the provider answers after the
// service's timeout (slow_), and the answer is lost on its way back and
// never comes (the link holds it). In both the event comes first.
func TestTheLiveRequestAnswersWhatTheWebhookRecordedFirst(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ref  string
		// hold puts a link in front of the provider that never delivers
		// its answers.
		hold bool
	}{
		{"an answer later than the timeout", "slow_wh_first", false},
		{"an answer lost on its way back", "pi_held_wh_first", true},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"WEBHOOK_SECRETS": webhookSecret, "PROVIDER_TIMEOUT": "2s"}
			sb := sandboxprovider.StartForTest(t, sandboxprovider.Config{SlowDelay: 20 * time.Second, MaxRequestAge: time.Second})
			if tc.hold {
				link, err := faultproxy.New("tcp", strings.TrimPrefix(sb.URL, "http://"))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(link.Close)
				if err := link.SetMode(faultproxy.HoldResponses); err != nil {
					t.Fatal(err)
				}
				env["SANDBOX_PROVIDER_URL"] = "http://" + link.Addr()
			}
			svc := servicetest.Start(t, servicetest.Options{DSN: testdb.New(t), Env: env, Sandbox: sb})
			s := &testService{url: svc.URL, db: svc.DB, provider: sb}
			order := int64(3701 + i)
			key := "wh-first-" + tc.ref
			body := chargeBody(order, 42, "19.99", "EUR", tc.ref)
			s.addOrder(t, order, 42, "19.99", "EUR")

			var live response
			done := make(chan struct{})
			go func() {
				defer close(done)
				live = s.charge(t, key, body)
			}()
			// The provider has charged; the call waits for an answer that
			// comes too late, or never. Its event arrives meanwhile.
			waitFor(t, func() bool { return len(s.ledger(t).Succeeded(tc.ref)) == 1 })
			event := providerEvent(t, "evt_"+tc.ref, "charge.succeeded", s.providerAnswer(t, tc.ref))
			if r := webhookResult(t, s.deliverSigned(t, event, webhookSecret)); r != "applied" {
				t.Fatalf("the event: %s, want applied while the call is out", r)
			}
			<-done

			if live.status != http.StatusCreated || decode[paymentJSON](t, live).Status != "SUCCEEDED" || live.header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("the live request answered %d %s (replayed %q); want the 201 the event recorded, as its own answer",
					live.status, live.body, live.header.Get("Idempotent-Replayed"))
			}
			replay := s.charge(t, key, body)
			if replay.status != http.StatusCreated || !bytes.Equal(replay.body, live.body) || replay.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("the replay: %d %s, want the same bytes as the live answer %s", replay.status, replay.body, live.body)
			}
			st := s.state(t, key, order, tc.ref)
			if st.recordStatus != "COMPLETED" || st.recordHTTP != http.StatusCreated || st.payments["SUCCEEDED"] != 1 || len(st.payments) != 1 ||
				st.events != 1 || len(st.charged) != 1 {
				t.Fatalf("%+v; want the key COMPLETED 201, one SUCCEEDED payment with one event, one charge", st)
			}
		})
	}
}

// heldProvider is an HTTP link in front of the sandbox that holds the first
// charge request it gets until the test releases it, and forwards it then,
// as a network may hold a request while its sender has given up. It counts
// the lookups it forwards.
type heldProvider struct {
	url      string
	held     chan struct{} // closed when the first charge request is held
	release  chan struct{}
	landed   chan struct{} // closed once the held request was forwarded
	lookups  atomic.Int32
	first    atomic.Bool
	released sync.Once
}

func holdFirstCharge(t *testing.T, upstream string) *heldProvider {
	t.Helper()
	h := &heldProvider{held: make(chan struct{}), release: make(chan struct{}), landed: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		isCharge := r.Method == http.MethodPost && r.URL.Path == "/v1/charges"
		if r.Method == http.MethodGet && r.URL.Path == "/v1/charges" {
			h.lookups.Add(1)
		}
		held := isCharge && h.first.CompareAndSwap(false, true)
		if held {
			close(h.held)
			<-h.release
		}
		// Forwarded whether or not its sender still waits.
		req, err := http.NewRequestWithContext(context.Background(), r.Method, upstream+r.URL.RequestURI(), bytes.NewReader(body)) //nolint:gosec // G704: a test proxy forwarding to the test's own server
		if err != nil {
			t.Error(err)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req) //nolint:gosec // G704: a test proxy forwarding to the test's own server
		if held {
			close(h.landed)
		}
		if err != nil {
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(func() {
		h.releaseNow()
		srv.Close()
	})
	h.url = srv.URL
	return h
}

func (h *heldProvider) releaseNow() { h.released.Do(func() { close(h.release) }) }

// A resumed charge refused for good, under whose key the provider holds
// nothing, is FAILED only once no earlier attempt's request can still land
// (PROVIDER_MAX_REQUEST_AGE after its claim). The first attempt's request
// is held on its way; the attempt gives up (503 outcome-unknown). Its
// retry takes the key over, is refused for good (refuseonce_: a refusal
// that speaks for its own request only) and finds nothing under the key.
// Then the held request lands:
//
//   - within the provider's request bound: the provider charges it. The
//     retry, which waited out the bound, finds the charge and records it:
//     201, never FAILED beside a charge;
//   - after it: the provider refuses it as too old, nothing is charged,
//     and the retry records FAILED once the bound has passed.
func TestAResumedRefusalWaitsForAnEarlierRequestInFlight(t *testing.T) {
	t.Parallel()
	const bound = 2 * time.Second
	tests := []struct {
		name         string
		landsLate    bool // released past the bound
		wantStatus   int
		wantPayment  string
		wantCharges  int
		wantExpired  int
		wantProblem  string
		releaseAfter func(h *heldProvider, sentAt time.Time)
	}{
		{name: "the held request lands within the bound", wantStatus: http.StatusCreated, wantPayment: "SUCCEEDED", wantCharges: 1,
			// Once the retry has looked the key up and found nothing.
			releaseAfter: func(h *heldProvider, _ time.Time) {
				deadline := time.Now().Add(10 * time.Second)
				for h.lookups.Load() < 1 && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
			}},
		{name: "the held request lands past the bound", wantStatus: http.StatusPaymentRequired, wantPayment: "FAILED", wantExpired: 1,
			wantProblem: "payment-failed",
			releaseAfter: func(h *heldProvider, sentAt time.Time) {
				time.Sleep(time.Until(sentAt.Add(bound + 300*time.Millisecond)))
			}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sb := sandboxprovider.StartForTest(t, sandboxprovider.Config{MaxRequestAge: bound})
			link := holdFirstCharge(t, sb.URL)
			svc := servicetest.Start(t, servicetest.Options{DSN: testdb.New(t), Sandbox: sb, Env: map[string]string{
				"SANDBOX_PROVIDER_URL":     link.url,
				"PROVIDER_TIMEOUT":         "1s",
				"PROVIDER_MAX_REQUEST_AGE": bound.String(),
			}})
			s := &testService{url: svc.URL, db: svc.DB, provider: sb}
			order := int64(3801 + i)
			ref := "refuseonce_inflight_" + string(rune('a'+i))
			key := "inflight-" + ref
			body := chargeBody(order, 42, "42.00", "RUB", ref)
			s.addOrder(t, order, 42, "42.00", "RUB")

			sentAt := time.Now()
			first := s.charge(t, key, body)
			wantProblem(t, first, http.StatusServiceUnavailable, "outcome-unknown")
			select {
			case <-link.held:
			default:
				t.Fatal("the first request was not held")
			}

			var retry response
			done := make(chan struct{})
			go func() {
				defer close(done)
				retry = s.charge(t, key, body)
			}()
			tc.releaseAfter(link, sentAt)
			link.releaseNow()
			<-link.landed
			<-done

			if retry.status != tc.wantStatus {
				t.Fatalf("the retry answered %d %s, want %d", retry.status, retry.body, tc.wantStatus)
			}
			if tc.wantProblem != "" {
				wantProblem(t, retry, tc.wantStatus, tc.wantProblem)
			}
			ledger := s.ledger(t)
			st := s.state(t, key, order, ref)
			if len(st.charged) != tc.wantCharges || st.payments[tc.wantPayment] != 1 || len(st.payments) != 1 || st.events != 1 ||
				ledger.Counters.Expired != tc.wantExpired {
				t.Fatalf("%+v, %d refused as too old; want one %s payment with one event, %d charges at the provider, %d refused as too old",
					st, ledger.Counters.Expired, tc.wantPayment, tc.wantCharges, tc.wantExpired)
			}
		})
	}
}
