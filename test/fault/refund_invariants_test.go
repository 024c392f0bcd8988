//go:build fault

package fault

// The invariants of refunds, against the same ground truths as a charge's:
// the provider's ledger of refunds, the refund, payment, idempotency_record
// and outbox_event tables, and the events on the topic.

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/shopspring/decimal"
)

// topicEvent is a refund event as read from the topic.
type topicEvent struct {
	typ string
	key string // the record's key: the order, as a string
}

func (c *checker) takeRefundEvent(refundID int64, eventID string, e topicEvent) {
	if c.refundEvents[refundID] == nil {
		c.refundEvents[refundID] = map[string]topicEvent{}
	}
	if _, dup := c.refundEvents[refundID][eventID]; dup {
		c.redeliveries++
	}
	c.refundEvents[refundID][eventID] = e
}

type refundRow struct {
	id      int64
	payment int64
	ext     string
	status  string
	amount  decimal.Decimal
}

func (r refundRow) String() string {
	return fmt.Sprintf("refund %d of payment %d (%s, %s %s)", r.id, r.payment, r.ext, r.status, r.amount)
}

// refundStatus is the service's status of a refund the provider decided.
var refundStatus = map[string]string{
	ledgerSucceeded: "SUCCEEDED",
	ledgerDeclined:  "DECLINED",
	// A modification received, then failed (the sandbox's received mode).
	ledgerFailed: "FAILED",
}

// failedAt reports whether the provider holds a FAILED row's object as it
// should: nothing under its key (refused for good), or, received and
// then failed, a failure.
func failedAt(held bool, status string) bool {
	return !held || status == ledgerFailed
}

// refundEventType is the event of a refund's final status.
var refundEventType = map[string]string{
	"SUCCEEDED": "PaymentRefunded.v1",
	"DECLINED":  "RefundDeclined.v1",
	"FAILED":    "RefundFailed.v1",
}

// checkRefunds verifies, for the payments that refunds refund and every
// answer the clients saw for those refunds:
//
//   - the provider's ledger and the refund table agree, per payment: the
//     provider's succeeded refunds add up to at most what it charged; it
//     holds at most one refund per external refund, under that refund's
//     own key; each of its refunds is a refund row with its decision and
//     amount (nothing lost), and each decided row is at the provider with
//     the same (nothing recorded that was not refunded), a FAILED one not
//     at all;
//   - no refund is PENDING, no key IN_PROGRESS, and payment.refund_reserved
//     is the sum of the payment's PENDING and SUCCEEDED refunds;
//   - every answer is the key's stored outcome, byte for byte, or
//     retryable, and what it says is true: a 201 is a refund the provider
//     made, a 422 refund-declined one it declined, refund-failed one it
//     does not hold, and a refund-exceeds-payment whose key kept no record
//     left nothing, neither a refund row nor a refund at the provider;
//   - every final refund has exactly one outbox row, published, keyed by
//     the order, of the type its status says, and on the topic exactly that
//     one eventId, with that key and type; a refund that is not final has
//     none.
//
// It waits (bounded) for the relay to publish. It returns what is wrong.
func (c *checker) checkRefunds(refunds []refundOp, answers []answer) violations {
	var v violations
	if len(refunds) == 0 {
		return v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := c.s

	payments := map[int64]paid{}
	var paymentIDs []int64
	var scopes []scope
	byKey := map[scope]refundOp{}
	for _, r := range refunds {
		if _, ok := payments[r.paid.id]; !ok {
			payments[r.paid.id] = r.paid
			paymentIDs = append(paymentIDs, r.paid.id)
		}
		sc := scope{r.paid.client(), r.key}
		scopes = append(scopes, sc)
		byKey[sc] = r
	}

	// The refund table.
	rows := map[string]refundRow{} // by external refund id
	byPayment := map[int64][]refundRow{}
	res, err := s.db.Query(ctx, `SELECT id, payment_id, external_refund_id, status, amount FROM refund WHERE payment_id = ANY($1)`, paymentIDs)
	if err != nil {
		v.add("read refunds: %v", err)
		return v
	}
	for res.Next() {
		var r refundRow
		if err := res.Scan(&r.id, &r.payment, &r.ext, &r.status, &r.amount); err != nil {
			v.add("scan refund: %v", err)
			return v
		}
		rows[r.ext] = r
		byPayment[r.payment] = append(byPayment[r.payment], r)
		if r.status == "PENDING" {
			v.add("refund %d (%s) of payment %d is still PENDING", r.id, r.ext, r.payment)
		}
	}
	res.Close()
	if err := res.Err(); err != nil {
		v.add("read refunds: %v", err)
	}

	for id, p := range payments {
		// The provider's refunds of the payment's charge, under any key.
		charged := decimal.Zero
		if charges := s.ledger.chargesFor(p.ext); len(charges) == 1 && charges[0].status == ledgerSucceeded {
			charged = charges[0].amount
		}
		refunded := decimal.Zero
		perRef := map[string]int{}
		for _, pr := range s.ledger.refundsFor(p.ext) {
			perRef[pr.reference]++
			if want := refundKey(p.op, pr.reference); pr.key != want {
				v.add("the provider refunded %s under key %q, not the refund's own %q", pr.reference, pr.key, want)
			}
			if pr.status == ledgerSucceeded {
				refunded = refunded.Add(pr.amount)
			}
			row, ok := rows[pr.reference]
			switch {
			case !ok:
				v.add("the provider %s refund %s (%s) of payment %d and the service has no refund for it: a lost refund", pr.status, pr.reference, pr.amount, id)
			case row.status != refundStatus[pr.status]:
				v.add("refund %d (%s) is %s but the provider says %s", row.id, row.ext, row.status, pr.status)
			case !row.amount.Equal(pr.amount):
				v.add("refund %d (%s) is for %s but the provider refunded %s", row.id, row.ext, row.amount, pr.amount)
			}
		}
		for ref, n := range perRef {
			if n > 1 {
				v.add("the provider holds %d refunds for external refund %s: refunded more than once", n, ref)
			}
		}
		if refunded.GreaterThan(charged) {
			v.add("the provider refunded %s of payment %d (%s), which it charged %s", refunded, id, p.ext, charged)
		}

		// The service's refunds, against the provider and the payment's total.
		counted := decimal.Zero
		for _, r := range byPayment[id] {
			pr, at := s.ledger.refund(refundKey(p.op, r.ext))
			switch r.status {
			case "SUCCEEDED", "DECLINED":
				if !at || refundStatus[pr.status] != r.status {
					v.add("refund %d (%s) is %s but the provider holds %v (%s)", r.id, r.ext, r.status, at, pr.status)
				}
			case "FAILED":
				if !failedAt(at, pr.status) {
					v.add("refund %d (%s) is FAILED but the provider %s it", r.id, r.ext, pr.status)
				}
			}
			if r.status == "PENDING" || r.status == "SUCCEEDED" {
				counted = counted.Add(r.amount)
			}
		}
		var reserved decimal.Decimal
		if err := s.db.QueryRow(ctx, `SELECT refund_reserved FROM payment WHERE id = $1`, id).Scan(&reserved); err != nil {
			v.add("read payment %d: %v", id, err)
		} else if !reserved.Equal(counted) {
			v.add("payment %d reserves %s for refunds, and its PENDING and SUCCEEDED refunds add up to %s", id, reserved, counted)
		}
	}

	// The keys, and every answer.
	records := c.records(ctx, scopes, &v)
	for _, a := range answers {
		if !a.refund {
			continue
		}
		checkAnswer(a, records, &v)
		o := byKey[scope{a.client, a.key}]
		row, recorded := rows[o.ext]
		pr, at := s.ledger.refund(o.providerKey())
		switch {
		case a.status == http.StatusCreated:
			if !recorded || row.status != "SUCCEEDED" || !at || pr.status != ledgerSucceeded {
				v.add("%s: the refund table says %+v and the provider %v %s", a, row, at, pr.status)
			}
		case a.code == "refund-declined":
			if !recorded || row.status != "DECLINED" || !at || pr.status != ledgerDeclined {
				v.add("%s: the refund table says %+v and the provider %v %s", a, row, at, pr.status)
			}
		case a.code == "refund-failed":
			if !recorded || row.status != "FAILED" || !failedAt(at, pr.status) {
				v.add("%s: the refund table says %+v and the provider %v %s", a, row, at, pr.status)
			}
		case a.code == codeRefundExceeds:
			// Not stored: a later attempt with the same key may have fitted,
			// once a refund in progress was declined; if none did, the
			// refusal left nothing.
			if _, kept := records[scope{a.client, a.key}]; !kept && (recorded || at) {
				v.add("%s: but the refund table has %+v and the provider %v %s", a, row, at, pr.status)
			}
		}
	}

	// The outbox and the topic: one event per final refund.
	final := map[int64]refundRow{}
	var refundIDs []int64
	for _, r := range rows {
		refundIDs = append(refundIDs, r.id)
		if _, ok := refundEventType[r.status]; ok {
			final[r.id] = r
		}
	}
	outbox, ok := c.awaitOutbox(ctx, &v, "these refunds", func() bool { return seenAll(final, c.refundEvents) },
		`SELECT (payload->>'refundId')::bigint, event_id::text, event_type, message_key, published_at IS NULL
			FROM outbox_event WHERE (payload->>'refundId')::bigint = ANY($1)`, refundIDs)
	if !ok {
		return v
	}
	for id, os := range outbox {
		if _, ok := final[id]; !ok {
			v.add("outbox rows %v for refund %d, which is not final", os, id)
		}
	}
	for id, r := range final {
		order := strconv.FormatInt(payments[r.payment].order, 10)
		want := refundEventType[r.status]
		os := outbox[id]
		if len(os) != 1 {
			v.add("refund %d (%s): %d outbox rows, want 1", id, r.status, len(os))
			continue
		}
		if os[0].typ != want || os[0].key != order {
			v.add("refund %d (%s): its outbox row is %+v, want type %s keyed by order %s", id, r.status, os[0], want, order)
		}
		seen := c.refundEvents[id]
		if len(seen) != 1 {
			v.add("refund %d (%s): %d distinct eventIds on the topic (%v), want 1", id, r.status, len(seen), seen)
			continue
		}
		if e, ok := seen[os[0].eventID]; !ok || e.typ != want || e.key != order {
			v.add("refund %d (%s): the topic has %+v, want eventId %s of type %s keyed by order %s", id, r.status, seen, os[0].eventID, want, order)
		}
	}
	return v
}

// checkRefundsGlobal is checkGlobal's part for refunds, exact while no
// request is in flight: the provider's count of refunds equals the number
// of SUCCEEDED refunds and its declines the DECLINED ones; nothing is
// PENDING; every refund is some key's recovery point; and every payment's
// refund_reserved is the sum of its PENDING and SUCCEEDED refunds.
func (c *checker) checkRefundsGlobal(v *violations) {
	s := c.s
	l := s.ledger.counts()
	if n := s.count(`SELECT count(*) FROM refund WHERE status = 'SUCCEEDED'`); l.refunds != n {
		v.add("the provider made %d refunds and the service has %d SUCCEEDED refunds", l.refunds, n)
	}
	if n := s.count(`SELECT count(*) FROM refund WHERE status = 'DECLINED'`); l.refundDeclines != n {
		v.add("the provider declined %d refunds and the service has %d DECLINED refunds", l.refundDeclines, n)
	}
	if n := s.count(`SELECT count(*) FROM refund WHERE status = 'PENDING'`); n != 0 {
		v.add("%d refunds PENDING", n)
	}
	if n := s.count(`SELECT count(*) FROM refund WHERE status = 'FAILED'`); n < l.refundFailures {
		v.add("the provider failed %d refunds it received and the service has %d FAILED refunds", l.refundFailures, n)
	}
	if n := s.count(`SELECT count(*) FROM refund WHERE received_at IS NOT NULL`); n != 0 {
		v.add("%d refunds still await their provider's decision", n)
	}
	if n := s.count(`SELECT count(*) FROM refund f WHERE NOT EXISTS (SELECT 1 FROM idempotency_record r WHERE r.refund_id = f.id)`); n != 0 {
		v.add("%d refunds that no idempotency record holds: partial state", n)
	}
	if n := s.count(`SELECT count(*) FROM payment p WHERE refund_reserved <>
		(SELECT coalesce(sum(amount), 0) FROM refund f WHERE f.payment_id = p.id AND f.status IN ('PENDING', 'SUCCEEDED'))`); n != 0 {
		v.add("%d payments whose refund_reserved is not the sum of their PENDING and SUCCEEDED refunds", n)
	}
}
