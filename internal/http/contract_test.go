package http_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/go-playground/validator/v10"

	"github.com/example/payment-service/internal/config"
	"github.com/example/payment-service/internal/webhooksig"
)

// TestContractOpenAPI sends real requests to the running service and checks
// both directions against api/openapi.yaml: every response must match the
// spec, and the spec must accept exactly the requests the service accepts
// (a request the service rejects with 400/413/415 must break the spec too).
func TestContractOpenAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startService(t, map[string]string{"WEBHOOK_SECRETS": webhookSecret, "OPERATOR_CLIENTS": "demo-client"})
	router := specRouter(t, s.url)
	s.addOrder(t, 1001, 42, "100.50", "RUB")
	s.addOrder(t, 1002, 42, "3.00", "JPY")
	s.addOrder(t, 1003, 42, "9.99", "EUR")
	s.addOrder(t, 1005, 42, "5.00", "RUB")
	s.addOrder(t, 1006, 42, "7.00", "RUB")
	// As the order-projection consumer writes it: with saga and version.
	if _, err := s.db.Exec(ctx, `INSERT INTO order_projection (order_id, customer_id, amount, currency, saga_id, last_event_at, last_event_id)
		VALUES (1004, 42, 100.5, 'RUB', '0193a3c8-7a4e-7cc1-8a1e-3f0e2b6c9d01', '2026-11-29T10:00:00Z', '0193a3c8-7a4e-7cc1-8a1e-3f0e2b6c9d02')`); err != nil {
		t.Fatal(err)
	}

	keepReconciliationRun(t, s.db)
	operatorOnly := map[string]string{"Authorization": "Bearer " + otherKey}

	charge := chargeBody(1001, 42, "100.50", "RUB", "pi_contract")
	refund := `{"amount":"10.00","externalRefundId":"re_contract"}`
	webhook := func(id, typ, key, status, amount string) string {
		return `{"id":"` + id + `","type":"` + typ + `","created":"2026-12-01T10:00:00Z","data":{"id":"ch_1","idempotencyKey":"` + key +
			`","status":"` + status + `","amount":` + amount + `,"currency":"RUB","reference":"pi_contract","created":"2026-12-01T10:00:00Z"}}`
	}
	agreeing := webhook("evt_contract_1", "charge.succeeded", "sandbox:pi_contract", "succeeded", `"100.50"`)
	contradicting := webhook("evt_contract_2", "charge.declined", "sandbox:pi_contract", "declined", `"100.50"`)
	unknownObject := webhook("evt_contract_3", "charge.succeeded", "sandbox:pi_nobody", "succeeded", `"100.50"`)
	amountNumber := webhook("evt_contract_4", "charge.succeeded", "sandbox:pi_contract", "succeeded", `100.50`)
	signed := func(body string) map[string]string {
		return map[string]string{webhooksig.Header: webhooksig.Sign(time.Now(), []byte(body), []byte(webhookSecret))}
	}
	exchanges := []exchange{
		{name: "charge", method: "POST", path: "/payments", key: "c1", body: charge, wantStatus: 201},
		{name: "replay", method: "POST", path: "/payments", key: "c1", body: charge, wantStatus: 201},
		{name: "existing external payment", method: "POST", path: "/payments", key: "c2", body: charge, wantStatus: 200},
		{name: "external conflict", method: "POST", path: "/payments", key: "c3", body: chargeBody(1003, 42, "9.99", "EUR", "pi_contract"), wantStatus: 409},
		{name: "key reused", method: "POST", path: "/payments", key: "c1", body: chargeBody(1003, 42, "9.99", "EUR", "pi_other"), wantStatus: 409},
		{name: "declined", method: "POST", path: "/payments", key: "c4", body: chargeBody(1002, 42, "3", "JPY", "decline_x"), wantStatus: 402},
		{name: "unknown order", method: "POST", path: "/payments", key: "c5", body: chargeBody(9999, 42, "1", "RUB", "pi_9"), wantStatus: 422},
		{name: "provider failure", method: "POST", path: "/payments", key: "c6", body: chargeBody(1003, 42, "9.99", "EUR", "fail_x"), wantStatus: 503},
		{name: "order already paid", method: "POST", path: "/payments", key: "c9", body: chargeBody(1001, 42, "100.50", "RUB", "pi_again"), wantStatus: 409},
		{name: "outcome unknown", method: "POST", path: "/payments", key: "c10", body: chargeBody(1005, 42, "5.00", "RUB", "drop_x"), wantStatus: 503},
		{name: "outcome resolved", method: "POST", path: "/payments", key: "c10", body: chargeBody(1005, 42, "5.00", "RUB", "drop_x"), wantStatus: 201},
		{name: "no key", method: "POST", path: "/payments", body: charge, wantStatus: 400, specRejects: true},
		{name: "key too long", method: "POST", path: "/payments", key: strings.Repeat("k", 256), body: charge, wantStatus: 400, specRejects: true},
		{name: "replay, key quoted", method: "POST", path: "/payments", key: `"c1"`, body: charge, wantStatus: 201},
		{name: "key quoted, 255 once decoded", method: "POST", path: "/payments", key: `"` + strings.Repeat(`\"`, 255) + `"`, body: chargeBody(9999, 42, "1", "RUB", "pi_9"), wantStatus: 422},
		{name: "replay, key with spaces around it", method: "POST", path: "/payments", key: " \tc1 ", body: charge, wantStatus: 201},
		{name: "key only spaces", method: "POST", path: "/payments", key: "   ", body: charge, wantStatus: 400, specRejects: true},
		{name: "key an empty string", method: "POST", path: "/payments", key: `""`, body: charge, wantStatus: 400, specRejects: true},
		{name: "key quoted, unclosed", method: "POST", path: "/payments", key: `"c1`, body: charge, wantStatus: 400, specRejects: true},
		{name: "key quoted, bad escape", method: "POST", path: "/payments", key: `"c\1"`, body: charge, wantStatus: 400, specRejects: true},
		{name: "key quoted, with parameters", method: "POST", path: "/payments", key: `"c1";x=1`, body: charge, wantStatus: 400, specRejects: true},
		{name: "key quoted, 256 once decoded", method: "POST", path: "/payments", key: `"` + strings.Repeat("k", 256) + `"`, body: charge, wantStatus: 400, specRejects: true},
		{name: "invalid fields", method: "POST", path: "/payments", key: "c7", body: `{"orderId":0,"customerId":42,"amount":"1.23456","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"x"}`, wantStatus: 400, specRejects: true},
		{name: "amount zero", method: "POST", path: "/payments", key: "c7", body: chargeBody(9999, 42, "0", "RUB", "pi_9"), wantStatus: 400, specRejects: true},
		{name: "amount zero with fraction digits", method: "POST", path: "/payments", key: "c7", body: chargeBody(9999, 42, "000.0000", "RUB", "pi_9"), wantStatus: 400, specRejects: true},
		{name: "amount with leading and trailing zeros", method: "POST", path: "/payments", key: "c5", body: chargeBody(9999, 42, "000.0100", "RUB", "pi_9"), wantStatus: 422},
		{name: "currency of the right shape but unknown", method: "POST", path: "/payments", key: "c7", body: chargeBody(9999, 42, "1", "AAA", "pi_9"), wantStatus: 400, specRejects: true},
		{name: "currency a fund code", method: "POST", path: "/payments", key: "c5", body: chargeBody(9999, 42, "1", "XTS", "pi_9"), wantStatus: 422},
		{name: "order id beyond int64", method: "POST", path: "/payments", key: "c7", body: `{"orderId":99999999999999999999,"customerId":42,"amount":"1","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"x"}`, wantStatus: 400, specRejects: true},
		{name: "unknown field", method: "POST", path: "/payments", key: "c7", body: `{"orderId":1,"customerId":42,"amount":"1","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"x","tip":"1"}`, wantStatus: 400, specRejects: true},
		{name: "amount as number", method: "POST", path: "/payments", key: "c7", body: `{"orderId":1,"customerId":42,"amount":1,"currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"x"}`, wantStatus: 400, specRejects: true},
		{name: "repeated field name", method: "POST", path: "/payments", key: "c7", body: `{"orderId":1002,` + charge[1:], wantStatus: 400, specBlind: true},
		{name: "unknown provider", method: "POST", path: "/payments", key: "c7", body: `{"orderId":1,"customerId":42,"amount":"1","currency":"RUB","paymentProvider":"acme","externalPaymentId":"x"}`, wantStatus: 400, specRejects: true},
		{name: "a payment method, which the sandbox ignores", method: "POST", path: "/payments", key: "c12", body: withPaymentMethod(chargeBody(1006, 42, "7.00", "RUB", "pi_contract_6"), `"pm_card_visa"`), wantStatus: 201},
		{name: "a payment method with a space", method: "POST", path: "/payments", key: "c7", body: withPaymentMethod(chargeBody(1006, 42, "7.00", "RUB", "pi_contract_7"), `"pm card"`), wantStatus: 400, specRejects: true},
		{name: "a payment method not a string", method: "POST", path: "/payments", key: "c7", body: withPaymentMethod(chargeBody(1006, 42, "7.00", "RUB", "pi_contract_7"), `7`), wantStatus: 400, specRejects: true},
		// The spec lists every provider the API names; this service runs
		// with the sandbox only.
		{name: "a provider this service does not charge through", method: "POST", path: "/payments", key: "c7", body: strings.Replace(chargeBody(1006, 42, "7.00", "RUB", "pi_contract_7"), `"sandbox"`, `"stripe"`, 1), wantStatus: 422},
		{name: "wrong content type", method: "POST", path: "/payments", key: "c7", contentType: "text/plain", body: charge, wantStatus: 415, specRejects: true},
		{name: "no auth", method: "POST", path: "/payments", key: "c8", body: charge, noAuth: true, wantStatus: 401, specRejects: true},
		{name: "get payment", method: "GET", path: "/payments/1", wantStatus: 200},
		{name: "get missing payment", method: "GET", path: "/payments/424242", wantStatus: 404},
		{name: "payment id zero", method: "GET", path: "/payments/0", wantStatus: 400, specRejects: true},
		{name: "payment id not a number", method: "GET", path: "/payments/abc", wantStatus: 400, specRejects: true},
		{name: "payment id beyond int64", method: "GET", path: "/payments/99999999999999999999", wantStatus: 400, specRejects: true},
		{name: "refund", method: "POST", path: "/payments/1/refunds", key: "r1", body: refund, wantStatus: 201},
		{name: "refund replay", method: "POST", path: "/payments/1/refunds", key: "r1", body: refund, wantStatus: 201},
		{name: "existing external refund", method: "POST", path: "/payments/1/refunds", key: "r2", body: refund, wantStatus: 200},
		{name: "external refund conflict", method: "POST", path: "/payments/1/refunds", key: "r3", body: `{"amount":"11","externalRefundId":"re_contract"}`, wantStatus: 409},
		{name: "refund exceeds the payment", method: "POST", path: "/payments/1/refunds", key: "r4", body: `{"amount":"100.50","externalRefundId":"re_big"}`, wantStatus: 409},
		{name: "refund declined", method: "POST", path: "/payments/1/refunds", key: "r5", body: `{"amount":"1","externalRefundId":"decline_re"}`, wantStatus: 422},
		{name: "refund failed", method: "POST", path: "/payments/1/refunds", key: "r6", body: `{"amount":"1","externalRefundId":"refuse_re"}`, wantStatus: 422},
		{name: "refund of a missing payment", method: "POST", path: "/payments/424242/refunds", key: "r7", body: refund, wantStatus: 404},
		{name: "refund unknown field", method: "POST", path: "/payments/1/refunds", key: "r8", body: `{"amount":"1","externalRefundId":"x","currency":"RUB"}`, wantStatus: 400, specRejects: true},
		{name: "refund amount as number", method: "POST", path: "/payments/1/refunds", key: "r8", body: `{"amount":1,"externalRefundId":"x"}`, wantStatus: 400, specRejects: true},
		{name: "refund amount zero", method: "POST", path: "/payments/1/refunds", key: "r8", body: `{"amount":"0.00","externalRefundId":"x"}`, wantStatus: 400, specRejects: true},
		{name: "refund of payment id zero", method: "POST", path: "/payments/0/refunds", key: "r8", body: refund, wantStatus: 400, specRejects: true},
		{name: "refund without a key", method: "POST", path: "/payments/1/refunds", body: refund, wantStatus: 400, specRejects: true},
		{name: "list refunds", method: "GET", path: "/payments/1/refunds", wantStatus: 200},
		{name: "list refunds of a missing payment", method: "GET", path: "/payments/424242/refunds", wantStatus: 404},
		{name: "list refunds of payment id zero", method: "GET", path: "/payments/0/refunds", wantStatus: 400, specRejects: true},
		{name: "charge the order written by an event", method: "POST", path: "/payments", key: "c11", body: chargeBody(1004, 42, "100.50", "RUB", "pi_contract_4"), wantStatus: 201},
		{name: "get order", method: "GET", path: "/orders/1001", wantStatus: 200},
		{name: "get order written by an event", method: "GET", path: "/orders/1004", wantStatus: 200},
		{name: "get missing order", method: "GET", path: "/orders/424242", wantStatus: 404},
		{name: "order id not a number", method: "GET", path: "/orders/abc", wantStatus: 400, specRejects: true},
		{name: "order id zero", method: "GET", path: "/orders/0", wantStatus: 400, specRejects: true},
		{name: "get order without auth", method: "GET", path: "/orders/1001", noAuth: true, wantStatus: 401, specRejects: true},
		// The provider's events: the charge c1 made, as its lookup answers.
		{name: "stripe's webhook, to a service that does not charge through Stripe", method: "POST", path: "/webhooks/stripe", noAuth: true, body: `{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{}}}`,
			headers: map[string]string{"Stripe-Signature": "t=1,v1=00"}, wantStatus: 404},
		{name: "stripe's webhook unsigned: refused before anything is said of the configuration", method: "POST", path: "/webhooks/stripe", noAuth: true, body: `{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{}}}`,
			wantStatus: 401, specRejects: true},
		{name: "webhook agreeing", method: "POST", path: "/webhooks/sandbox", noAuth: true, body: agreeing, headers: signed(agreeing), wantStatus: 200},
		{name: "webhook redelivered", method: "POST", path: "/webhooks/sandbox", noAuth: true, body: agreeing, headers: signed(agreeing), wantStatus: 200},
		{name: "webhook contradicting", method: "POST", path: "/webhooks/sandbox", noAuth: true, body: contradicting, headers: signed(contradicting), wantStatus: 200},
		{name: "webhook for an unknown object", method: "POST", path: "/webhooks/sandbox", noAuth: true, body: unknownObject, headers: signed(unknownObject), wantStatus: 404},
		{name: "webhook badly signed", method: "POST", path: "/webhooks/sandbox", noAuth: true, body: agreeing, headers: map[string]string{webhooksig.Header: "t=1,v1=00"}, wantStatus: 401},
		{name: "webhook unsigned", method: "POST", path: "/webhooks/sandbox", noAuth: true, body: agreeing, wantStatus: 401, specRejects: true},
		{name: "webhook not an event", method: "POST", path: "/webhooks/sandbox", noAuth: true, body: `{"id":"evt_x"}`, headers: signed(`{"id":"evt_x"}`), wantStatus: 400, specRejects: true},
		{name: "webhook amount as number", method: "POST", path: "/webhooks/sandbox", noAuth: true, body: amountNumber, headers: signed(amountNumber), wantStatus: 400, specRejects: true},
		{name: "webhook wrong content type", method: "POST", path: "/webhooks/sandbox", noAuth: true, contentType: "text/plain", body: agreeing, headers: signed(agreeing), wantStatus: 415, specRejects: true},
		{name: "reconciliation runs", method: "GET", path: "/reconciliation/runs", wantStatus: 200},
		{name: "reconciliation runs, a page", method: "GET", path: "/reconciliation/runs?before=2&limit=1", wantStatus: 200},
		{name: "reconciliation runs, limit zero", method: "GET", path: "/reconciliation/runs?limit=0", wantStatus: 400, specRejects: true},
		{name: "reconciliation runs, not an operator", method: "GET", path: "/reconciliation/runs", headers: operatorOnly, wantStatus: 403},
		{name: "reconciliation runs, no auth", method: "GET", path: "/reconciliation/runs", noAuth: true, wantStatus: 401, specRejects: true},
		{name: "reconciliation run", method: "GET", path: "/reconciliation/runs/1", wantStatus: 200},
		{name: "reconciliation run missing", method: "GET", path: "/reconciliation/runs/424242", wantStatus: 404},
		{name: "reconciliation run id zero", method: "GET", path: "/reconciliation/runs/0", wantStatus: 400, specRejects: true},
		{name: "reconciliation run's items", method: "GET", path: "/reconciliation/runs/1/items", wantStatus: 200},
		{name: "reconciliation items of a missing run", method: "GET", path: "/reconciliation/runs/424242/items", wantStatus: 404},
		{name: "reconciliation items", method: "GET", path: "/reconciliation/items", wantStatus: 200},
		{name: "reconciliation items, a page", method: "GET", path: "/reconciliation/items?status=all&class=amount_differs&currency=RUB&limit=1", wantStatus: 200},
		{name: "reconciliation items, no such status", method: "GET", path: "/reconciliation/items?status=solved", wantStatus: 400, specRejects: true},
		{name: "reconciliation items, no such class", method: "GET", path: "/reconciliation/items?class=lost", wantStatus: 400, specRejects: true},
		{name: "reconciliation items, a currency of the right shape but unknown", method: "GET", path: "/reconciliation/items?currency=AAA", wantStatus: 400, specRejects: true},
		{name: "reconciliation summary", method: "GET", path: "/reconciliation/summary", wantStatus: 200},
		{name: "reconciliation page", method: "GET", path: "/reconciliation?day=2026-12-07", wantStatus: 200},
		{name: "reconciliation page, not a day", method: "GET", path: "/reconciliation?day=yesterday", wantStatus: 400, specRejects: true},
		{name: "reconciliation page, a day named empty", method: "GET", path: "/reconciliation?day=", wantStatus: 400, specRejects: true},
		{name: "reconciliation items, filters named empty", method: "GET", path: "/reconciliation/items?class=&status=&currency=", wantStatus: 400, specRejects: true},
		{name: "reconciliation runs, a page named empty", method: "GET", path: "/reconciliation/runs?before=", wantStatus: 400, specRejects: true},
		{name: "reconciliation runs, before the largest id", method: "GET", path: "/reconciliation/runs?before=9223372036854775807&limit=1", wantStatus: 200},
		{name: "reconciliation items, after the largest id", method: "GET", path: "/reconciliation/items?after=9223372036854775807", wantStatus: 200},
		{name: "reconciliation items of a run beyond int4", method: "GET", path: "/reconciliation/runs/3000000000/items", wantStatus: 404},
		{name: "healthz", method: "GET", path: "/healthz", wantStatus: 200},
		{name: "readyz", method: "GET", path: "/readyz", wantStatus: 200},
		{name: "health", method: "GET", path: "/health", wantStatus: 200},
		{name: "metrics", method: "GET", path: "/metrics", wantStatus: 200},
		{name: "openapi", method: "GET", path: "/openapi.yaml", noAuth: true, wantStatus: 200},
		{name: "asyncapi", method: "GET", path: "/asyncapi.yaml", noAuth: true, wantStatus: 200},
		{name: "docs", method: "GET", path: "/docs", noAuth: true, wantStatus: 200},
		{name: "problems", method: "GET", path: "/problems", noAuth: true, wantStatus: 200},
	}

	checkExchanges(t, s, router, exchanges)
}

// exchange is one request of a contract test and what must come of it.
type exchange struct {
	name        string
	method      string
	path        string
	key         string // Idempotency-Key; empty: none
	contentType string // default application/json when there is a body
	body        string
	noAuth      bool
	wantStatus  int
	// specRejects: the spec must also reject the request.
	specRejects bool
	// specBlind: the service rejects what no schema can express (a
	// repeated name is gone once the JSON is parsed); only the
	// response is checked against the spec.
	specBlind bool
	// headers are set on the request as they are.
	headers map[string]string
}

// specRouter is api/openapi.yaml, valid, routing to the service at url.
func specRouter(t *testing.T, url string) routers.Router {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the spec itself is invalid: %v", err)
	}
	// The /docs page is HTML; the checker reads it as text.
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
	// Route by path on whatever port the test service got.
	doc.Servers = openapi3.Servers{{URL: url}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return router
}

// checkExchanges sends each exchange to s, in order, and checks both
// directions against the spec: the spec accepts exactly the requests the
// service accepts, and every response matches it.
func checkExchanges(t *testing.T, s *testService, router routers.Router, exchanges []exchange) {
	t.Helper()
	ctx := context.Background()
	for _, ex := range exchanges {
		req, err := http.NewRequest(ex.method, s.url+ex.path, strings.NewReader(ex.body))
		if err != nil {
			t.Fatal(err)
		}
		if !ex.noAuth {
			req.Header.Set("Authorization", "Bearer "+demoKey)
		}
		if ex.key != "" {
			req.Header.Set("Idempotency-Key", ex.key)
		}
		for name, value := range ex.headers {
			req.Header.Set(name, value)
		}
		if ex.body != "" {
			ct := ex.contentType
			if ct == "" {
				ct = "application/json"
			}
			req.Header.Set("Content-Type", ct)
		}

		// The spec's verdict on the request.
		route, pathParams, err := router.FindRoute(req)
		if err != nil {
			t.Fatalf("%s: no route in the spec: %v", ex.name, err)
		}
		reqInput := &openapi3filter.RequestValidationInput{
			Request: cloneRequest(t, req, ex.body), PathParams: pathParams, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: bearerPresent},
		}
		specErr := openapi3filter.ValidateRequest(ctx, reqInput)
		if ex.specRejects && specErr == nil {
			t.Errorf("%s: the service rejects this request but the spec accepts it", ex.name)
		}
		if !ex.specRejects && !ex.specBlind && specErr != nil {
			t.Errorf("%s: the spec rejects a request the service accepts: %v", ex.name, specErr)
		}

		// The service's answer, which must match the spec.
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != ex.wantStatus {
			t.Errorf("%s: status %d, want %d (%s)", ex.name, resp.StatusCode, ex.wantStatus, body)
			continue
		}
		respInput := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: reqInput,
			Status:                 resp.StatusCode,
			Header:                 resp.Header,
			Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
		}
		respInput.SetBodyBytes(body)
		if err := openapi3filter.ValidateResponse(ctx, respInput); err != nil {
			t.Errorf("%s: response %d does not match the spec: %v\n%s", ex.name, resp.StatusCode, err, body)
		}
	}
}

// bearerPresent stands in for authentication in the spec check: the spec
// only says a bearer key is required; whether it is right is the service's
// business.
func bearerPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if !strings.HasPrefix(in.RequestValidationInput.Request.Header.Get("Authorization"), "Bearer ") {
		return openapi3filter.ErrAuthenticationServiceMissing
	}
	return nil
}

func cloneRequest(t *testing.T, req *http.Request, body string) *http.Request {
	t.Helper()
	c := req.Clone(context.Background())
	c.Body = io.NopCloser(bytes.NewReader([]byte(body)))
	return c
}

// The draft (section 2.5.2) makes publishing the key's lifetime a MUST.
// The contract a client reads says it, and what it says is what the
// configuration enforces: 72 hours by default, never less than 24.
func TestContractPublishesHowLongAKeyBinds(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for where, text := range map[string]string{
		"info.description": doc.Info.Description,
		"the Idempotency-Key parameter's description": doc.Components.Parameters["IdempotencyKey"].Value.Description,
	} {
		text = strings.Join(strings.Fields(text), " ")
		for _, want := range []string{"at least 24 hours, 72 hours by default", "a request under the old key is a new operation"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s does not say %q", where, want)
			}
		}
	}

	env := map[string]string{"DATABASE_URL": "postgres://127.0.0.1/payments", "API_KEYS": "c:k", "SANDBOX_PROVIDER_URL": "http://127.0.0.1:1"}
	load := func(ttl string) (config.Config, error) {
		return config.Load(func(k string) string {
			if k == "IDEMPOTENCY_TTL" {
				return ttl
			}
			return env[k]
		})
	}
	if cfg, err := load(""); err != nil || cfg.Retention.IdempotencyTTL != 72*time.Hour {
		t.Errorf("the default TTL: %v, %v; the contract says 72 hours", cfg.Retention.IdempotencyTTL, err)
	}
	if _, err := load("24h"); err != nil {
		t.Errorf("IDEMPOTENCY_TTL=24h refused (%v); the contract says at least 24 hours", err)
	}
	if _, err := load("23h59m"); err == nil {
		t.Error("IDEMPOTENCY_TTL=23h59m accepted; the contract says at least 24 hours")
	}
}

// The contract lists the currencies a charge may name (schemas.Currency),
// so a generator never picks a code the service refuses: the list must be
// exactly the codes the service's validator accepts ("iso4217"), checked
// over every three upper-case letters.
func TestContractCurrenciesAreTheValidatorsList(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	currency := doc.Components.Schemas["Currency"]
	if currency == nil {
		t.Fatal("the contract has no schema Currency")
	}
	inSpec := map[string]bool{}
	for _, v := range currency.Value.Enum {
		inSpec[v.(string)] = true
	}
	v := validator.New()
	letters := "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	accepted := 0
	for _, a := range letters {
		for _, b := range letters {
			for _, c := range letters {
				code := string([]rune{a, b, c})
				ok := v.Var(code, "iso4217") == nil
				if ok {
					accepted++
				}
				if ok != inSpec[code] {
					t.Errorf("%s: the validator accepts it: %v; the contract lists it: %v", code, ok, inSpec[code])
				}
			}
		}
	}
	if accepted != len(inSpec) {
		t.Errorf("the contract lists %d codes, the validator accepts %d of three letters", len(inSpec), accepted)
	}
}

// The contract of a provider that answers captures, voids and refunds
// "received" (the sandbox in its received mode): each is 202 with the
// pending resource and its Location, replayed as it was; the resource's
// GET; and an event that fails one.
func TestContractReceivedModifications(t *testing.T) {
	t.Parallel()
	s := startReceived(t, nil, receivedSandbox(0))
	router := specRouter(t, s.url)
	s.addOrder(t, 2001, 42, "100.00", "RUB")
	s.addOrder(t, 2002, 42, "100.00", "RUB")
	s.addOrder(t, 2003, 42, "100.00", "RUB")
	capture := captureBody("60.00", "RUB", "cap_contract")
	failed := `{"id":"evt_contract_f","type":"capture.failed","created":"2026-12-01T10:00:00Z","data":{"id":"cp_1","idempotencyKey":"sandbox:pi_nobody:capture:x",` +
		`"status":"failed","amount":"1.00","currency":"RUB","reference":"x","failureReason":"the hold lapsed","created":"2026-12-01T10:00:00Z"}}`
	checkExchanges(t, s, router, []exchange{
		{name: "authorize", method: "POST", path: "/payments", key: "a1", body: authorizeBody(2001, "100.00", "pi_contract_auth"), wantStatus: 201},
		{name: "capture received", method: "POST", path: "/payments/1/captures", key: "k1", body: capture, wantStatus: 202},
		{name: "capture received, replayed", method: "POST", path: "/payments/1/captures", key: "k1", body: capture, wantStatus: 202},
		{name: "get the capture", method: "GET", path: "/payments/1/captures/1", wantStatus: 200},
		{name: "get a capture that is not", method: "GET", path: "/payments/1/captures/999", wantStatus: 404},
		{name: "get the capture as a void", method: "GET", path: "/payments/1/voids/1", wantStatus: 404},
		{name: "get a capture of a missing payment", method: "GET", path: "/payments/999/captures/1", wantStatus: 404},
		{name: "get capture id zero", method: "GET", path: "/payments/1/captures/0", wantStatus: 400, specRejects: true},
		{name: "charge", method: "POST", path: "/payments", key: "c1", body: chargeBody(2002, 42, "100.00", "RUB", "pi_contract_paid"), wantStatus: 201},
		{name: "refund received", method: "POST", path: "/payments/2/refunds", key: "r1", body: refundBody("10.00", "re_contract"), wantStatus: 202},
		{name: "refund received, replayed", method: "POST", path: "/payments/2/refunds", key: "r1", body: refundBody("10.00", "re_contract"), wantStatus: 202},
		{name: "get the refund", method: "GET", path: "/payments/2/refunds/1", wantStatus: 200},
		{name: "get a refund that is not", method: "GET", path: "/payments/2/refunds/999", wantStatus: 404},
		{name: "get the refund under another payment", method: "GET", path: "/payments/1/refunds/1", wantStatus: 404},
		{name: "authorize another", method: "POST", path: "/payments", key: "a2", body: authorizeBody(2003, "100.00", "pi_contract_auth2"), wantStatus: 201},
		{name: "void received", method: "POST", path: "/payments/3/voids", key: "v1", body: "{}", wantStatus: 202},
		{name: "get the void", method: "GET", path: "/payments/3/voids/2", wantStatus: 200},
		{name: "a failure's event for an object the service does not hold", method: "POST", path: "/webhooks/sandbox", noAuth: true, body: failed,
			headers: map[string]string{webhooksig.Header: webhooksig.Sign(time.Now(), []byte(failed), []byte(webhookSecret))}, wantStatus: 404},
	})
}
