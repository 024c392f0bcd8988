package stripefake

import (
	"encoding/json"
	"net/http"
	"time"
)

// paymentIntent is a PaymentIntent as the fake keeps it; its JSON is
// Stripe's shape of the object (the fields the fake keeps, every other
// one null or absent, as the document allows).
type paymentIntent struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Amount             int64             `json:"amount"`
	AmountCapturable   int64             `json:"amount_capturable"`
	AmountReceived     int64             `json:"amount_received"`
	CanceledAt         *int64            `json:"canceled_at"`
	CancellationReason *string           `json:"cancellation_reason"`
	CaptureMethod      string            `json:"capture_method"`
	ConfirmationMethod string            `json:"confirmation_method"`
	Created            int64             `json:"created"`
	Currency           string            `json:"currency"`
	LastPaymentError   *apiError         `json:"last_payment_error"`
	LatestCharge       *string           `json:"latest_charge"`
	Livemode           bool              `json:"livemode"`
	Metadata           map[string]string `json:"metadata"`
	NextAction         *nextAction       `json:"next_action"`
	PaymentMethod      *string           `json:"payment_method"`
	PaymentMethodTypes []string          `json:"payment_method_types"`
	Status             string            `json:"status"`

	seq int64 // the order objects were made in, for lists
	// searchableAt is when the search index has caught up with it.
	searchableAt time.Time
	refunded     int64 // the amount its refunds took
}

// nextAction is what a requires_action PaymentIntent waits for.
type nextAction struct {
	Type string `json:"type"`
}

// PaymentIntent statuses.
const (
	statusRequiresPaymentMethod = "requires_payment_method"
	statusRequiresConfirmation  = "requires_confirmation"
	statusRequiresAction        = "requires_action"
	statusProcessing            = "processing"
	statusRequiresCapture       = "requires_capture"
	statusSucceeded             = "succeeded"
	statusCanceled              = "canceled"
)

// refund is a Refund as the fake keeps it.
type refund struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Amount        int64             `json:"amount"`
	Charge        *string           `json:"charge"`
	Created       int64             `json:"created"`
	Currency      string            `json:"currency"`
	FailureReason *string           `json:"failure_reason,omitempty"`
	Metadata      map[string]string `json:"metadata"`
	PaymentIntent *string           `json:"payment_intent"`
	Reason        *string           `json:"reason"`
	Status        string            `json:"status"`

	seq int64
}

// charge is the Charge a charge.refunded event carries: only what that
// event says.
type charge struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Amount         int64             `json:"amount"`
	AmountCaptured int64             `json:"amount_captured"`
	AmountRefunded int64             `json:"amount_refunded"`
	BillingDetails struct{}          `json:"billing_details"`
	Captured       bool              `json:"captured"`
	Created        int64             `json:"created"`
	Currency       string            `json:"currency"`
	Disputed       bool              `json:"disputed"`
	Livemode       bool              `json:"livemode"`
	Metadata       map[string]string `json:"metadata"`
	Paid           bool              `json:"paid"`
	PaymentIntent  *string           `json:"payment_intent"`
	Refunded       bool              `json:"refunded"`
	Status         string            `json:"status"`
}

// apiError is Stripe's error object.
type apiError struct {
	Type          string         `json:"type"`
	Code          string         `json:"code,omitempty"`
	DeclineCode   string         `json:"decline_code,omitempty"`
	Message       string         `json:"message,omitempty"`
	Param         string         `json:"param,omitempty"`
	Charge        string         `json:"charge,omitempty"`
	PaymentIntent *paymentIntent `json:"payment_intent,omitempty"`
}

// list is a page of a list or a search.
type list struct {
	Object   string  `json:"object"`
	Data     []any   `json:"data"`
	HasMore  bool    `json:"has_more"`
	URL      string  `json:"url"`
	NextPage *string `json:"next_page,omitempty"`
}

// copyIntent is a snapshot of p, safe to encode after the lock is let go.
func copyIntent(p *paymentIntent) *paymentIntent {
	c := *p
	c.Metadata = copyMap(p.Metadata)
	return &c
}

func copyRefund(r *refund) *refund {
	c := *r
	c.Metadata = copyMap(r.Metadata)
	return &c
}

func copyMap(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// encode is v's JSON; the fake's objects always encode.
func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_fake")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeError(w http.ResponseWriter, status int, e apiError) {
	writeJSON(w, status, errorBody(e))
}

func errorBody(e apiError) []byte {
	return encode(struct {
		Error apiError `json:"error"`
	}{e})
}

func ptr[T any](v T) *T { return &v }
