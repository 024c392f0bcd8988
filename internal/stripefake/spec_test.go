package stripefake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/example/payment-service/internal/stripefake"
)

// Stripe's OpenAPI document, as the stripe-mock module in go.mod embeds it
// (embedded/openapi/spec3.json), found in the module cache through go
// list: the fake's answers are held to it, so the fake cannot drift from
// Stripe's shapes. Loading it takes seconds, once per test binary.
var stripeSpec = sync.OnceValues(func() (routers.Router, error) {
	out, err := exec.Command("go", "list", "-m", "-json", "github.com/stripe/stripe-mock").Output()
	if err != nil {
		return nil, err
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return nil, err
	}
	if mod.Dir == "" {
		// Not in the module cache yet: go mod download brings it.
		if err := exec.Command("go", "mod", "download", "github.com/stripe/stripe-mock").Run(); err != nil {
			return nil, err
		}
		if out, err = exec.Command("go", "list", "-m", "-json", "github.com/stripe/stripe-mock").Output(); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(out, &mod); err != nil {
			return nil, err
		}
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(filepath.Join(mod.Dir, "embedded", "openapi", "spec3.json"))
	if err != nil {
		return nil, err
	}
	doc.Servers = openapi3.Servers{{URL: "http://stripe.test"}}
	return gorillamux.NewRouter(doc)
})

// validated serves h and checks every answer it gives against Stripe's
// document: a status the operation does not declare, or a body its schema
// refuses, fails t.
func validated(t *testing.T, h http.Handler) http.Handler {
	t.Helper()
	router, err := stripeSpec()
	if err != nil {
		t.Fatalf("loading Stripe's OpenAPI document from stripe-mock's module: %v", err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		for k, vs := range rec.Header() {
			w.Header()[k] = vs
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		checkAnswer(t, router, r, rec.Code, rec.Header(), rec.Body.Bytes())
	})
}

// checkAnswer holds one answer to the document.
func checkAnswer(t *testing.T, router routers.Router, r *http.Request, status int, header http.Header, body []byte) {
	t.Helper()
	u := *r.URL
	u.Scheme, u.Host = "http", "stripe.test"
	probe, _ := http.NewRequest(r.Method, u.String(), nil) //nolint:gosec // G704: a probe for the router's lookup, never sent
	route, params, err := router.FindRoute(probe)
	if err != nil {
		t.Errorf("%s %s: no such operation in Stripe's document: %v", r.Method, r.URL.Path, err)
		return
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: probe, PathParams: params, Route: route},
		Status:                 status, Header: header, Body: io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("%s %s answered %d, which Stripe's document refuses: %v\n%s", r.Method, r.URL.Path, status, err, body)
	}
}

// checkEvent holds an event's body to the document: the event, and its
// object to the schema its type names.
func checkEvent(t *testing.T, ev stripefake.Event) {
	t.Helper()
	router, err := stripeSpec()
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Data struct {
			Object json.RawMessage `json:"object"`
		} `json:"data"`
	}
	if err := json.Unmarshal(ev.Body, &e); err != nil {
		t.Fatalf("event %s: %v", ev.ID, err)
	}
	// The event as GET /v1/events/{id} answers it, and its object as
	// its own retrieve does.
	checkBody(t, router, "/v1/events/"+ev.ID, ev.Body)
	switch object := strings.SplitN(ev.Type, ".", 2)[0]; {
	case object == "payment_intent":
		checkBody(t, router, "/v1/payment_intents/pi_1", e.Data.Object)
	case strings.HasPrefix(ev.Type, "refund.") || ev.Type == "charge.refund.updated":
		checkBody(t, router, "/v1/refunds/re_1", e.Data.Object)
	case ev.Type == "charge.refunded":
		checkBody(t, router, "/v1/charges/ch_1", e.Data.Object)
	default:
		t.Errorf("event %s of type %s: no schema to check its object with", ev.ID, ev.Type)
	}
}

// checkBody holds body to what GET path answers with 200.
func checkBody(t *testing.T, router routers.Router, path string, body []byte) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	checkAnswer(t, router, r, http.StatusOK, http.Header{"Content-Type": {"application/json"}}, body)
}
