package consumer

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/example/payment-service/internal/strictjson"
)

// FuzzDecodeOrderEvent feeds arbitrary record values to the order-event
// decoder. Whatever the value:
//
//   - it never panics, and an error is always a *PoisonError with one of
//     the known reasons (the record goes to the dead-letter topic);
//   - a value that names a field twice is poison;
//   - an accepted event is valid (positive ids, a positive amount, a
//     date within the allowed window), and written back as JSON decodes to
//     the same event.
//
// Without -fuzz it runs over the seeds below and testdata/fuzz.
func FuzzDecodeOrderEvent(f *testing.F) {
	for _, seed := range []string{
		`{"eventId":"019ad4c2-5f0e-7c3a-9b1d-2e4f6a8c0b13","eventType":"OrderCreated.v1","orderId":1001,"customerId":42,"amount":"100.50","currency":"RUB","occurredAt":"2026-11-30T10:00:00Z"}`,
		`{"eventId":"019ad4c2-5f0e-7c3a-9b1d-2e4f6a8c0b13","sagaId":"019ad4c1-0000-7000-8000-000000000001","eventType":"OrderCreated.v1","orderId":1,"customerId":1,"amount":1E+3,"occurredAt":"2026-11-30T10:00:00.123456789+03:00"}`,
		`{"eventId":"019ad4c2-5f0e-7c3a-9b1d-2e4f6a8c0b13","eventType":"OrderCreated.v1","orderId":1,"customerId":1,"amount":"1e-10000","occurredAt":"2026-11-30T10:00:00Z"}`,
		`{"eventId":"x","eventType":"OrderCreated.v1","orderId":1,"orderId":2}`,
		`{"eventId":"019ad4c2-5f0e-7c3a-9b1d-2e4f6a8c0b13","eventType":"OrderCreated.v1","orderId":1,"customerId":1,"amount":"5","occurredAt":"2999-01-01T00:00:00Z"}`,
		`{"eventId":"019ad4c2-5f0e-7c3a-9b1d-2e4f6a8c0b13","eventType":"OrderCreated.v1","orderId":1,"customerId":1,"amount":"5","currency":"XX","occurredAt":"2026-11-30T10:00:00Z"}`,
		`[]`, `null`, `{}`, `"x"`, ``,
	} {
		f.Add([]byte(seed))
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	d := decoder{defaultCurrency: "RUB", maxSkew: 5 * time.Minute, now: func() time.Time { return now }}
	reasons := map[string]bool{ReasonInvalidJSON: true, ReasonInvalidEventID: true, ReasonUnknownEventType: true,
		ReasonInvalidAmount: true, ReasonInvalidField: true, ReasonDuplicateKey: true, ReasonInvalidTime: true}
	f.Fuzz(func(t *testing.T, value []byte) {
		e, err := d.decode(value)
		if err != nil {
			var p *PoisonError
			if !errors.As(err, &p) || !reasons[p.Reason] {
				t.Fatalf("value %q: error %v is not a poison with a known reason", value, err)
			}
			return
		}
		if len(strictjson.DuplicateKeys(value)) > 0 {
			t.Fatalf("value %q names a field twice and was accepted", value)
		}
		if e.Order.ID <= 0 || e.Order.CustomerID <= 0 || !e.Order.Total.Amount().IsPositive() ||
			e.OccurredAt.After(now.Add(d.maxSkew)) || e.OccurredAt.Before(earliestOccurredAt) {
			t.Fatalf("value %q was accepted as an invalid event %+v", value, e)
		}
		fields := map[string]any{
			"eventId": e.EventID.String(), "eventType": EventTypeOrderCreated, "orderId": e.Order.ID, "customerId": e.Order.CustomerID,
			"amount": e.Order.Total.Amount().String(), "currency": e.Order.Total.Currency(), "occurredAt": e.OccurredAt.Format(time.RFC3339Nano),
		}
		if e.SagaID.Valid {
			fields["sagaId"] = e.SagaID.UUID.String()
		}
		again, _ := json.Marshal(fields)
		back, err := d.decode(again)
		if err != nil {
			t.Fatalf("value %q decoded to %+v, which written back as %s is refused: %v", value, e, again, err)
		}
		if back.EventID != e.EventID || back.SagaID != e.SagaID || back.Order.ID != e.Order.ID || back.Order.CustomerID != e.Order.CustomerID ||
			!back.Order.Total.Amount().Equal(e.Order.Total.Amount()) || back.Order.Total.Currency() != e.Order.Total.Currency() || !back.OccurredAt.Equal(e.OccurredAt) {
			t.Fatalf("value %q: the round trip %s changed the event: %+v vs %+v", value, again, e, back)
		}
	})
}
