//go:build fault

package fault

// The invariants of a two-step payment, against the provider's ledger of
// authorizations, captures, voids and refunds, and the payment,
// payment_transition, refund, idempotency_record and outbox_event tables.
// The checks are a function of what was read (twoStepFacts), so that a
// test can feed them a bad ledger and see each one fail
// (twostep_checker_test.go).

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/sandboxprovider"
)

// twoStepFacts is what the checks of one two-step payment read.
type twoStepFacts struct {
	ref     string // the authorization's reference: the externalPaymentId
	ledger  sandboxprovider.Ledger
	payment twoStepRow
	// transitions are the payment's payment_transition rows.
	transitions []transitionRow
	refunds     []refundRow
	records     map[scope]recordRow
	// answers are every answer the clients saw for the payment's
	// captures, voids and refunds; replays the answers to each completed
	// key sent once more after the round.
	answers []answer
	replays []answer
	// outbox is every outbox row of the payment (its refunds' included);
	// topic the eventIds the topic showed for it, with their types.
	outbox []twoStepEvent
	topic  map[string]string
	// expiryDue: the completer's runs had time to ask about the hold since
	// it lapsed (lapse_test.go), so an AUTHORIZED payment whose hold the
	// provider let lapse is a lapse left unrecorded.
	expiryDue bool
}

type twoStepRow struct {
	id       int64
	status   string
	amount   decimal.Decimal
	captured *decimal.Decimal
}

type transitionRow struct {
	id          int64
	kind        string
	status      string
	providerKey string
}

type twoStepEvent struct {
	eventID   string
	typ       string
	published bool
}

// check verifies, for one two-step payment:
//
//   - the provider holds exactly one succeeded authorization for it, and
//     at most one capture or void of it succeeded; what was captured is
//     at most what was authorized; what was refunded of the capture is at
//     most what it took (and NetCaptured, the provider's own account,
//     names no violation);
//   - the payment is SUCCEEDED if and only if exactly one capture
//     succeeded at the provider, with captured_amount what it took;
//     VOIDED if and only if one void succeeded; EXPIRED if and only if
//     the provider says the hold lapsed (so with neither); AUTHORIZED
//     otherwise, and not once the completer had time to see a lapse
//     (expiryDue); no capture succeeded after the hold's time was up;
//   - the transitions and the ledger agree: no transition PENDING; each
//     SUCCEEDED or DECLINED one is at the provider under its key with that
//     decision, a FAILED one is not; each capture and void the provider
//     made of the authorization is a transition (nothing lost);
//   - the refunds and the ledger agree: none PENDING, and the SUCCEEDED
//     ones add up to what the provider refunded of the capture;
//   - every answer is the key's stored outcome, byte for byte, or a final
//     answer that stores nothing, or retryable; a 201 to a capture shows
//     the payment SUCCEEDED and one to a void VOIDED, as the table says;
//     every completed key, sent again, replays its stored answer byte for
//     byte;
//   - the payment's outbox rows are all published and on the topic with
//     their types: one PaymentAuthorized.v1, one PaymentCaptured.v1 if it
//     is SUCCEEDED, one PaymentVoided.v1 if it is VOIDED, one
//     PaymentExpired.v1 if it is EXPIRED, and none of each otherwise.
func (f twoStepFacts) check() violations {
	var v violations
	auths := f.ledger.SucceededAuthorizations(f.ref)
	if len(auths) != 1 {
		v.add("two-step %s: %d succeeded authorizations at the provider, want 1", f.ref, len(auths))
		return v
	}
	auth := auths[0]
	authKey := auth.IdempotencyKey

	var captures []sandboxprovider.Capture
	var voids []sandboxprovider.Void
	byKey := map[string]sandboxprovider.ChargeStatus{}
	for _, c := range f.ledger.Captures {
		if c.Authorization == authKey {
			captures = append(captures, c)
			byKey[c.IdempotencyKey] = c.Status
		}
	}
	for _, vo := range f.ledger.Voids {
		if vo.Authorization == authKey {
			voids = append(voids, vo)
			byKey[vo.IdempotencyKey] = vo.Status
		}
	}
	var won []sandboxprovider.Capture
	captured := decimal.Zero
	for _, c := range captures {
		if c.Status == sandboxprovider.StatusSucceeded {
			won = append(won, c)
			captured = captured.Add(c.Amount)
		}
	}
	voided := 0
	for _, vo := range voids {
		if vo.Status == sandboxprovider.StatusSucceeded {
			voided++
		}
	}
	if len(won)+voided > 1 {
		v.add("two-step %s: %d captures and %d voids of authorization %s succeeded, want at most one of all", f.ref, len(won), voided, authKey)
	}
	if captured.GreaterThan(auth.Amount) {
		v.add("two-step %s: captured %s of an authorization of %s", f.ref, captured, auth.Amount)
	}
	captureKeys := map[string]decimal.Decimal{}
	for _, c := range won {
		captureKeys[c.IdempotencyKey] = c.Amount
	}
	refunded := map[string]decimal.Decimal{}
	providerRefunds := map[string]sandboxprovider.ChargeStatus{}
	total := decimal.Zero
	for _, r := range f.ledger.Refunds {
		if _, ok := captureKeys[r.Charge]; !ok {
			continue
		}
		providerRefunds[r.Reference] = r.Status
		if r.Status == sandboxprovider.StatusSucceeded {
			refunded[r.Charge] = refunded[r.Charge].Add(r.Amount)
			total = total.Add(r.Amount)
		}
	}
	for key, amount := range refunded {
		if amount.GreaterThan(captureKeys[key]) {
			v.add("two-step %s: refunded %s of capture %s, which took %s", f.ref, amount, key, captureKeys[key])
		}
	}
	if net := f.ledger.NetCaptured(f.ref); len(net.Violations) > 0 {
		v.add("two-step %s: the provider's account names violations: %v", f.ref, net.Violations)
	}

	// The payment against the ledger.
	p := f.payment
	switch {
	case p.status == "SUCCEEDED" && len(won) != 1:
		v.add("payment %d (%s) is SUCCEEDED and the provider holds %d succeeded captures of it", p.id, f.ref, len(won))
	case p.status != "SUCCEEDED" && len(won) > 0:
		v.add("payment %d (%s) is %s and the provider captured it (%s): a lost capture", p.id, f.ref, p.status, captured)
	case p.status == "SUCCEEDED" && (p.captured == nil || !p.captured.Equal(won[0].Amount)):
		v.add("payment %d (%s) is SUCCEEDED with captured_amount %v and the provider captured %s", p.id, f.ref, p.captured, won[0].Amount)
	}
	switch {
	case p.status == "VOIDED" && voided != 1:
		v.add("payment %d (%s) is VOIDED and the provider holds %d succeeded voids of it", p.id, f.ref, voided)
	case p.status != "VOIDED" && voided > 0:
		v.add("payment %d (%s) is %s and the provider voided it: a lost void", p.id, f.ref, p.status)
	}
	lapsed := auth.Hold == sandboxprovider.HoldExpired
	switch {
	case p.status == "EXPIRED" && (!lapsed || len(won)+voided > 0):
		v.add("payment %d (%s) is EXPIRED and the provider's hold is %q with %d captures and %d voids succeeded", p.id, f.ref, auth.Hold, len(won), voided)
	case p.status != "EXPIRED" && lapsed && (p.status != "AUTHORIZED" || f.expiryDue):
		v.add("payment %d (%s) is %s and the provider says its hold lapsed: a lapse not recorded", p.id, f.ref, p.status)
	}
	for _, c := range won {
		if !auth.ExpiresAt.IsZero() && c.Created.After(auth.ExpiresAt) {
			v.add("two-step %s: capture %s succeeded at %s, after the hold lapsed at %s", f.ref, c.IdempotencyKey, c.Created, auth.ExpiresAt)
		}
	}
	if p.status != "SUCCEEDED" && p.status != "VOIDED" && p.status != "AUTHORIZED" && p.status != "EXPIRED" {
		v.add("payment %d (%s) is %s, want SUCCEEDED, VOIDED, EXPIRED or AUTHORIZED", p.id, f.ref, p.status)
	}

	// The transitions against the ledger.
	rowOf := map[string]transitionRow{}
	for _, t := range f.transitions {
		rowOf[t.providerKey] = t
		at, made := byKey[t.providerKey]
		switch t.status {
		case "PENDING":
			v.add("%s %d of payment %d is still PENDING", t.kind, t.id, p.id)
		case "SUCCEEDED", "DECLINED":
			if !made || refundStatus[string(at)] != t.status {
				v.add("%s %d of payment %d is %s and the provider holds %v (%s) under %s", t.kind, t.id, p.id, t.status, made, at, t.providerKey)
			}
		case "FAILED":
			if !failedAt(made, string(at)) {
				v.add("%s %d of payment %d is FAILED and the provider %s it under %s", t.kind, t.id, p.id, at, t.providerKey)
			}
		}
	}
	for key, status := range byKey {
		if _, ok := rowOf[key]; !ok {
			v.add("the provider %s %s of payment %d and the service has no transition for it: lost", status, key, p.id)
		}
	}

	// The refunds against the ledger.
	succeeded := decimal.Zero
	for _, r := range f.refunds {
		switch r.status {
		case "PENDING":
			v.add("%s is still PENDING", r)
		case "SUCCEEDED":
			succeeded = succeeded.Add(r.amount)
		}
		if at, made := providerRefunds[r.ext]; (r.status == "SUCCEEDED" || r.status == "DECLINED") && (!made || refundStatus[string(at)] != r.status) {
			v.add("%s and the provider holds %v (%s)", r, made, at)
		}
	}
	if !succeeded.Equal(total) {
		v.add("payment %d (%s): its SUCCEEDED refunds add up to %s and the provider refunded %s of its capture", p.id, f.ref, succeeded, total)
	}

	// Every answer, and the replays.
	for _, a := range f.answers {
		checkAnswer(a, f.records, &v)
		// The same key and command get the stored answer or "in
		// progress": a payment moves out of AUTHORIZED only by one
		// transition, so a refusal beside its own key's transition made
		// is a refusal the request that made it never got.
		if r, ok := f.records[scope{a.client, a.key}]; ok && a.transition && transitionRefused[a.code] &&
			r.httpStatus != nil && *r.httpStatus == http.StatusCreated {
			v.add("%s: refused, while its own key's %s was made", a, derefs(r.response))
		}
		if a.transition && a.status == http.StatusCreated {
			var body struct {
				Status string `json:"status"`
			}
			_ = json.Unmarshal(a.body, &body)
			if body.Status != p.status {
				v.add("%s: the payment is %s", a, p.status)
			}
		}
	}
	for _, a := range f.replays {
		r := f.records[scope{a.client, a.key}]
		if r.httpStatus == nil || a.status != *r.httpStatus || r.response == nil || !bytes.Equal(a.body, []byte(*r.response)) || !a.replayed {
			v.add("%s: the completed key's replay (replayed %v) differs from its stored outcome %v %v", a, a.replayed, deref(r.httpStatus), derefs(r.response))
		}
	}

	// The outbox and the topic.
	types := map[string]int{}
	for _, e := range f.outbox {
		types[e.typ]++
		if !e.published {
			v.add("payment %d: outbox row %s (%s) unpublished", p.id, e.eventID, e.typ)
		}
		if typ, ok := f.topic[e.eventID]; !ok || typ != e.typ {
			v.add("payment %d: outbox row %s (%s) is not on the topic (%q)", p.id, e.eventID, e.typ, typ)
		}
	}
	want := map[string]int{"PaymentAuthorized.v1": 1, "PaymentCaptured.v1": 0, "PaymentVoided.v1": 0, "PaymentExpired.v1": 0}
	switch p.status {
	case "SUCCEEDED":
		want["PaymentCaptured.v1"] = 1
	case "VOIDED":
		want["PaymentVoided.v1"] = 1
	case "EXPIRED":
		want["PaymentExpired.v1"] = 1
	}
	for typ, n := range want {
		if types[typ] != n {
			v.add("payment %d (%s): %d %s outbox rows, want %d", p.id, p.status, types[typ], typ, n)
		}
	}
	return v
}

// checkTwoStep reads the facts of the round's two-step payment (none for
// a round without one) and checks them. It first sends each completed key
// once more, and waits (bounded) for the relay to publish the payment's
// events.
func (c *checker) checkTwoStep(p *twoStepPlan) violations {
	var v violations
	if p == nil {
		return v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := c.s
	f := twoStepFacts{ref: p.auth.ext, answers: p.answers, expiryDue: p.expiryDue}
	id := p.payment.id

	var scopes []scope
	calls := map[scope]call{}
	for _, t := range append(append([]plannedTransition{}, p.captures...), p.voids...) {
		sc := scope{t.paid.client(), t.key}
		scopes, calls[sc] = append(scopes, sc), t.call()
	}
	for _, r := range p.refundOps {
		sc := scope{r.paid.client(), r.key}
		scopes, calls[sc] = append(scopes, sc), r.call()
	}
	f.records = c.records(ctx, scopes, &v)
	up := s.running()
	for i, sc := range scopes {
		if r, ok := f.records[sc]; ok && r.status == "COMPLETED" && len(up) > 0 {
			p.replays = append(p.replays, up[i%len(up)].send(calls[sc], 5*time.Second))
		}
	}
	f.replays = p.replays

	if err := s.db.QueryRow(ctx, `SELECT id, status, amount, captured_amount FROM payment WHERE id = $1`, id).
		Scan(&f.payment.id, &f.payment.status, &f.payment.amount, &f.payment.captured); err != nil {
		v.add("read payment %d: %v", id, err)
		return v
	}
	rows, err := s.db.Query(ctx, `SELECT id, kind, status, provider_key FROM payment_transition WHERE payment_id = $1`, id)
	if err != nil {
		v.add("read transitions: %v", err)
		return v
	}
	for rows.Next() {
		var t transitionRow
		if err := rows.Scan(&t.id, &t.kind, &t.status, &t.providerKey); err != nil {
			v.add("scan transition: %v", err)
		}
		f.transitions = append(f.transitions, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		v.add("read transitions: %v", err)
	}
	rows, err = s.db.Query(ctx, `SELECT id, payment_id, external_refund_id, status, amount FROM refund WHERE payment_id = $1`, id)
	if err != nil {
		v.add("read refunds: %v", err)
		return v
	}
	for rows.Next() {
		var r refundRow
		if err := rows.Scan(&r.id, &r.payment, &r.ext, &r.status, &r.amount); err != nil {
			v.add("scan refund: %v", err)
		}
		f.refunds = append(f.refunds, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		v.add("read refunds: %v", err)
	}

	// The payment's events: wait until every row is published and on the
	// topic, bounded; what is still missing then is a violation below.
	deadline := time.Now().Add(45 * time.Second)
	for {
		f.outbox = f.outbox[:0]
		rows, err := s.db.Query(ctx, `SELECT event_id::text, event_type, published_at IS NOT NULL, (payload->>'refundId')::bigint FROM outbox_event
			WHERE (payload->>'paymentId')::bigint = $1`, id)
		if err != nil {
			v.add("read outbox: %v", err)
			return v
		}
		refundOf := map[string]int64{}
		for rows.Next() {
			var e twoStepEvent
			var refund *int64
			if err := rows.Scan(&e.eventID, &e.typ, &e.published, &refund); err != nil {
				v.add("scan outbox: %v", err)
			}
			if refund != nil {
				refundOf[e.eventID] = *refund
			}
			f.outbox = append(f.outbox, e)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			v.add("read outbox: %v", err)
		}
		c.readTopic(ctx, &v)
		f.topic = map[string]string{}
		for eventID, typ := range c.events[id] {
			f.topic[eventID] = typ
		}
		for _, e := range f.outbox {
			if r, ok := refundOf[e.eventID]; ok {
				if te, seen := c.refundEvents[r][e.eventID]; seen {
					f.topic[e.eventID] = te.typ
				}
			}
		}
		done := true
		for _, e := range f.outbox {
			if _, seen := f.topic[e.eventID]; !seen || !e.published {
				done = false
			}
		}
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.ledger = s.provider.Ledger()
	return append(v, f.check()...)
}
