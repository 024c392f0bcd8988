//go:build fault

package fault

// The invariants every fault test checks, against the ground truth of each
// layer: the provider's ledger (money), the payment, idempotency_record and
// outbox_event tables, and the events on the topic.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/kafkatest"
)

// paymentStatus is the service's status of a charge the provider decided.
var paymentStatus = map[string]string{ledgerSucceeded: "SUCCEEDED", ledgerDeclined: "DECLINED"}

// checker holds what the topic has shown so far, so that a long run reads
// each event once.
type checker struct {
	s    *stack
	tail *kafkatest.Tail
	// events: payment id -> event id -> event type, as read from the topic.
	events map[int64]map[string]string
	// refundEvents: refund id -> event id -> the event as read from the topic.
	refundEvents map[int64]map[string]topicEvent
	// redeliveries counts records whose eventId had been seen before: at
	// least once delivery allows them; consumers dedup on eventId.
	redeliveries int
}

func newChecker(s *stack) *checker {
	return &checker{s: s, tail: kafkatest.NewTail(s.brokers, s.topic), events: map[int64]map[string]string{},
		refundEvents: map[int64]map[string]topicEvent{}}
}

type paymentRow struct {
	id     int64
	order  int64
	client string
	ext    string
	status string
	amount decimal.Decimal
}

type recordRow struct {
	status     string
	httpStatus *int
	response   *string
	paymentID  *int64
}

type scope struct{ client, key string }

// violations collects what is wrong, to report all of it at once.
type violations []string

func (v *violations) add(format string, args ...any) { *v = append(*v, fmt.Sprintf(format, args...)) }

// check verifies, for the orders of ops (each op is one business operation
// of a client; several ops may share an order, as a careless client's do)
// and every answer the clients saw for them:
//
//   - no idempotency record is IN_PROGRESS and no payment PENDING;
//   - an order has at most one SUCCEEDED payment (one paid order is paid
//     once);
//   - for every external payment the clients named, the provider's ledger
//     and the payment table agree: a charge at the provider has its payment
//     row with the same decision and amount (nothing lost), and a decided
//     payment has its charge (nothing recorded that was not charged);
//   - every answer a client saw is either the key's stored outcome, byte
//     for byte, or a retryable 409/503 (or no answer at all);
//   - every decided payment has exactly one outbox row, published, and on
//     the topic exactly one distinct eventId, the outbox row's, of the type
//     its status says.
//
// It waits (bounded) for the relay to publish. It returns what is wrong.
func (c *checker) check(ops []op, answers []answer) violations {
	var v violations
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := c.s

	orders := map[int64]bool{}
	exts := map[string]bool{}
	var orderIDs []int64
	var scopes []scope
	for _, o := range ops {
		if !orders[o.order] {
			orders[o.order] = true
			orderIDs = append(orderIDs, o.order)
		}
		exts[o.ext] = true
		scopes = append(scopes, scope{o.client(), o.key})
	}

	// The payment table.
	payments := map[string]paymentRow{} // by external id
	byOrder := map[int64][]paymentRow{}
	rows, err := s.db.Query(ctx, `SELECT id, order_id, client_id, external_payment_id, status, amount FROM payment WHERE order_id = ANY($1)`, orderIDs)
	if err != nil {
		v.add("read payments: %v", err)
		return v
	}
	for rows.Next() {
		var p paymentRow
		if err := rows.Scan(&p.id, &p.order, &p.client, &p.ext, &p.status, &p.amount); err != nil {
			v.add("scan payment: %v", err)
			return v
		}
		payments[p.ext] = p
		byOrder[p.order] = append(byOrder[p.order], p)
		if !exts[p.ext] {
			v.add("payment %d for order %d has external id %q that no client sent", p.id, p.order, p.ext)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		v.add("read payments: %v", err)
	}
	for order, ps := range byOrder {
		succeeded := 0
		for _, p := range ps {
			switch p.status {
			case "PENDING":
				v.add("payment %d (order %d, %s) is still PENDING", p.id, order, p.ext)
			case "SUCCEEDED":
				succeeded++
			}
		}
		if succeeded > 1 {
			v.add("order %d has %d SUCCEEDED payments: paid more than once", order, succeeded)
		}
	}

	// The provider's ledger against the payment table, per external payment.
	for ext := range exts {
		// By reference, under any provider key: a retry that reached the
		// provider under a key of its own would be a second charge.
		charges := s.ledger.chargesFor(ext)
		if len(charges) > 1 {
			v.add("the provider charged %s %d times: %+v", ext, len(charges), charges)
		}
		var charge ledgerEntry
		charged := len(charges) > 0
		if charged {
			charge = charges[0]
		}
		p, recorded := payments[ext]
		switch {
		case charged && !recorded:
			v.add("the provider charged %s (%s %s) and the service has no payment for it: a lost charge", ext, charge.status, charge.amount)
		case charged && recorded:
			if want := paymentStatus[charge.status]; p.status != want {
				v.add("payment %d (%s) is %s but the provider says %s", p.id, ext, p.status, charge.status)
			}
			if !p.amount.Equal(charge.amount) {
				v.add("payment %d (%s) is for %s but the provider charged %s", p.id, ext, p.amount, charge.amount)
			}
		case !charged && recorded && p.status != "PENDING":
			v.add("payment %d (%s) is %s but the provider has no charge for it", p.id, ext, p.status)
		}
	}

	// The idempotency records, and every answer: the stored outcome, byte
	// for byte, or retryable. A refund's answers are checkRefunds'.
	records := c.records(ctx, scopes, &v)
	for _, a := range answers {
		if a.refund {
			continue
		}
		checkAnswer(a, records, &v)
		if a.status == http.StatusCreated || a.status == http.StatusPaymentRequired {
			var body struct {
				ExternalPaymentID string `json:"externalPaymentId"`
				Status            string `json:"status"`
				Payment           *struct {
					ExternalPaymentID string `json:"externalPaymentId"`
				} `json:"payment"`
			}
			_ = json.Unmarshal(a.body, &body)
			ext := body.ExternalPaymentID
			if body.Payment != nil {
				ext = body.Payment.ExternalPaymentID
			}
			if p, ok := payments[ext]; !ok || (a.status == http.StatusCreated) != (p.status == "SUCCEEDED") {
				v.add("%s: the payment table says %+v", a, p)
			}
		}
	}

	// The outbox and the topic: one event per decided payment.
	decided := map[int64]string{} // payment id -> status
	for _, p := range payments {
		if p.status == "SUCCEEDED" || p.status == "DECLINED" {
			decided[p.id] = p.status
		}
	}
	byPayment, ok := c.awaitOutbox(ctx, &v, "these orders", func() bool { return seenAll(decided, c.events) },
		`SELECT (payload->>'paymentId')::bigint, event_id::text, event_type, message_key, published_at IS NULL FROM outbox_event
			WHERE (payload->>'orderId')::bigint = ANY($1) AND payload->>'refundId' IS NULL`, orderIDs)
	if !ok {
		return v
	}
	outboxEvents := map[int64][]string{}
	for id, os := range byPayment {
		for _, o := range os {
			outboxEvents[id] = append(outboxEvents[id], o.eventID)
		}
	}
	for id, ids := range outboxEvents {
		if _, ok := decided[id]; !ok {
			v.add("outbox rows %v for payment %d, which is not decided", ids, id)
		}
	}
	for id, status := range decided {
		ids := outboxEvents[id]
		if len(ids) != 1 {
			v.add("payment %d (%s): %d outbox rows, want 1", id, status, len(ids))
			continue
		}
		seen := c.events[id]
		if len(seen) != 1 {
			v.add("payment %d (%s): %d distinct eventIds on the topic (%v), want 1", id, status, len(seen), seen)
			continue
		}
		wantType := map[string]string{"SUCCEEDED": "PaymentSucceeded.v1", "DECLINED": "PaymentDeclined.v1"}[status]
		if typ, ok := seen[ids[0]]; !ok || typ != wantType {
			v.add("payment %d (%s): the topic has %v, want eventId %s of type %s", id, status, seen, ids[0], wantType)
		}
	}
	return v
}

// records reads the idempotency record of every scope that has one, and
// adds a violation for each that is not COMPLETED.
func (c *checker) records(ctx context.Context, scopes []scope, v *violations) map[scope]recordRow {
	records := map[scope]recordRow{}
	for _, sc := range scopes {
		var r recordRow
		err := c.s.db.QueryRow(ctx, `SELECT status, http_status, response::text, payment_id FROM idempotency_record WHERE client_id = $1 AND idempotency_key = $2`,
			sc.client, sc.key).Scan(&r.status, &r.httpStatus, &r.response, &r.paymentID)
		if err != nil {
			continue // no record: the key was released, or never reached the service
		}
		records[sc] = r
		if r.status != "COMPLETED" {
			v.add("key %s/%s is still %s", sc.client, sc.key, r.status)
		}
	}
	return records
}

// checkAnswer: an answer a client saw is its key's stored outcome, byte for
// byte, or a final answer that stores nothing (checked by what it says), or
// retryable.
func checkAnswer(a answer, records map[scope]recordRow, v *violations) {
	switch {
	case a.stored():
		r, ok := records[scope{a.client, a.key}]
		switch {
		case !ok:
			v.add("%s: a final answer, but the key has no record", a)
		case r.httpStatus == nil || *r.httpStatus != a.status || r.response == nil || !bytes.Equal([]byte(*r.response), a.body):
			v.add("%s: differs from the key's stored outcome (%v %v)", a, deref(r.httpStatus), derefs(r.response))
		}
	case a.final():
	case !a.retryable():
		v.add("%s: neither the stored outcome nor a retryable answer", a)
	}
}

// outboxRow is one outbox_event row as the checks read it.
type outboxRow struct{ eventID, typ, key string }

// awaitOutbox reads the outbox rows that query selects (an id to group them
// by, event_id, event_type, message_key, and whether it is unpublished)
// until every one is published and the topic shows what seen waits for, or
// 45 s pass (a violation). It returns the rows by id; false if they could
// not be read.
func (c *checker) awaitOutbox(ctx context.Context, v *violations, what string, seen func() bool, query string, args ...any) (map[int64][]outboxRow, bool) {
	deadline := time.Now().Add(45 * time.Second)
	for {
		out := map[int64][]outboxRow{}
		unpublished := 0
		rows, err := c.s.db.Query(ctx, query, args...)
		if err != nil {
			v.add("read outbox: %v", err)
			return nil, false
		}
		for rows.Next() {
			var id int64
			var o outboxRow
			var pending bool
			if err := rows.Scan(&id, &o.eventID, &o.typ, &o.key, &pending); err != nil {
				rows.Close()
				v.add("scan outbox: %v", err)
				return nil, false
			}
			out[id] = append(out[id], o)
			if pending {
				unpublished++
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			v.add("read outbox: %v", err)
		}
		if unpublished == 0 && c.readTopic(ctx, v) && seen() {
			return out, true
		}
		if time.Now().After(deadline) {
			v.add("after 45s: %d outbox rows of %s unpublished, or events missing from the topic", unpublished, what)
			return out, true
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readTopic takes in what the topic gained; false if it could not be read.
func (c *checker) readTopic(ctx context.Context, v *violations) bool {
	recs, err := c.tail.Next(ctx)
	if err != nil {
		return false
	}
	for _, r := range recs {
		var e struct {
			EventID   string `json:"eventId"`
			EventType string `json:"eventType"`
			PaymentID int64  `json:"paymentId"`
			RefundID  int64  `json:"refundId"`
		}
		if err := json.Unmarshal(r.Value, &e); err != nil || e.EventID == "" || e.PaymentID == 0 {
			v.add("unreadable event at partition %d offset %d: %s", r.Partition, r.Offset, r.Value)
			continue
		}
		if e.RefundID != 0 {
			c.takeRefundEvent(e.RefundID, e.EventID, topicEvent{typ: e.EventType, key: string(r.Key)})
			continue
		}
		if c.events[e.PaymentID] == nil {
			c.events[e.PaymentID] = map[string]string{}
		}
		if _, dup := c.events[e.PaymentID][e.EventID]; dup {
			c.redeliveries++
		}
		c.events[e.PaymentID][e.EventID] = e.EventType
	}
	return true
}

// seenAll reports that the topic has shown an event for every id of want.
func seenAll[V, E any](want map[int64]V, seen map[int64]map[string]E) bool {
	for id := range want {
		if len(seen[id]) == 0 {
			return false
		}
	}
	return true
}

// checkGlobal compares the whole ledger with the whole payment table, and
// finds anything unfinished. It is exact only while no request is in
// flight: every charge the provider made is one SUCCEEDED payment, every
// decline one DECLINED payment, and nothing is IN_PROGRESS or PENDING; the
// same for refunds (checkRefundsGlobal).
func (c *checker) checkGlobal() violations {
	var v violations
	s := c.s
	l := s.ledger.counts()
	succeeded := s.count(`SELECT count(*) FROM payment WHERE status = 'SUCCEEDED' AND capture_method = 'automatic'`)
	declined := s.count(`SELECT count(*) FROM payment WHERE status = 'DECLINED' AND capture_method = 'automatic'`)
	if l.charges != succeeded {
		v.add("the provider made %d charges and the service has %d SUCCEEDED one-step payments", l.charges, succeeded)
	}
	if l.declines != declined {
		v.add("the provider declined %d charges and the service has %d DECLINED one-step payments", l.declines, declined)
	}
	// Two-step payments: each authorization a manual payment, each capture
	// a SUCCEEDED one, each void a VOIDED one.
	if n := s.count(`SELECT count(*) FROM payment WHERE capture_method = 'manual' AND status IN ('AUTHORIZED', 'SUCCEEDED', 'VOIDED', 'EXPIRED')`); l.authorizations != n {
		v.add("the provider made %d authorizations and the service has %d two-step payments that hold or held money", l.authorizations, n)
	}
	if n := s.count(`SELECT count(*) FROM payment WHERE capture_method = 'manual' AND status = 'SUCCEEDED'`); l.captures != n {
		v.add("the provider made %d captures and the service has %d SUCCEEDED two-step payments", l.captures, n)
	}
	if n := s.count(`SELECT count(*) FROM payment WHERE status = 'VOIDED'`); l.voids != n {
		v.add("the provider made %d voids and the service has %d VOIDED payments", l.voids, n)
	}
	if n := s.count(`SELECT count(*) FROM payment_transition WHERE status = 'PENDING'`); n != 0 {
		v.add("%d captures or voids PENDING", n)
	}
	if n := s.count(`SELECT count(*) FROM payment_transition WHERE status = 'FAILED'`); n < l.modificationFailures {
		v.add("the provider failed %d captures and voids it received and the service has %d FAILED ones", l.modificationFailures, n)
	}
	if n := s.count(`SELECT count(*) FROM payment_transition WHERE received_at IS NOT NULL`); n != 0 {
		v.add("%d captures or voids still await their provider's decision", n)
	}
	if n := l.undecided; n != 0 {
		v.add("the provider has %d modifications it received and has not decided", n)
	}
	if n := s.count(`SELECT count(*) FROM payment WHERE status = 'PENDING'`); n != 0 {
		v.add("%d payments PENDING", n)
	}
	if n := s.count(`SELECT count(*) FROM idempotency_record WHERE status = 'IN_PROGRESS'`); n != 0 {
		v.add("%d idempotency records IN_PROGRESS", n)
	}
	// Every payment was reserved with a claim, as its recovery point; one
	// that no record points at was left half-made.
	if n := s.count(`SELECT count(*) FROM payment p WHERE NOT EXISTS (SELECT 1 FROM idempotency_record r WHERE r.payment_id = p.id)`); n != 0 {
		v.add("%d payments that no idempotency record holds: partial state", n)
	}
	c.checkRefundsGlobal(&v)
	return v
}

// require fails the test with every violation.
func require(t interface {
	Helper()
	Fatalf(string, ...any)
}, v violations, context string) {
	t.Helper()
	if len(v) == 0 {
		return
	}
	sort.Strings(v)
	msg := ""
	for _, s := range v {
		msg += "\n  - " + s
	}
	t.Fatalf("%s: %d invariant violations:%s", context, len(v), msg)
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

func derefs(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}
