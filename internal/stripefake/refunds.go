package stripefake

import (
	"fmt"
	"net/http"
	"net/url"
)

// Refund statuses.
const (
	refundPending   = "pending"
	refundSucceeded = "succeeded"
	refundFailed    = "failed"
)

// createRefund is POST /v1/refunds of a PaymentIntent: at most what it
// received less what its refunds took.
func (s *Server) createRefund(_ *http.Request, v url.Values) (func(Fault) answer, *refusal) {
	f := newForm(v, "payment_intent", "amount", "metadata", "reason", "expand")
	piID := f.str("payment_intent")
	if piID == "" {
		f.fail(invalid("payment_intent", "One of the following params should be provided for this request: payment_intent or charge."))
	}
	amount := f.positive("amount", false)
	metadata := f.metadata()
	if f.bad != nil {
		return nil, f.bad
	}
	s.mu.Lock()
	p, ok := s.intents[piID]
	s.mu.Unlock()
	if !ok {
		return nil, missing("payment_intent", "No such payment_intent: '"+piID+"'")
	}
	return func(fault Fault) answer {
		s.mu.Lock()
		defer s.mu.Unlock()
		if p.Status != statusSucceeded {
			return answer{http.StatusBadRequest, errorBody(apiError{Type: "invalid_request_error", Code: "charge_not_refundable",
				Message: fmt.Sprintf("This PaymentIntent has a status of %s: only a succeeded one can be refunded.", p.Status)})}
		}
		left := p.AmountReceived - p.refunded
		if amount == 0 {
			amount = left
		}
		if amount > left {
			return answer{http.StatusBadRequest, errorBody(apiError{Type: "invalid_request_error", Code: "amount_too_large", Param: "amount",
				Message: fmt.Sprintf("Refund amount (%d) is greater than unrefunded amount on charge (%d).", amount, left)})}
		}
		rf := &refund{ID: s.nextID("re"), Object: "refund", Amount: amount, Charge: p.LatestCharge, Created: s.now().Unix(),
			Currency: p.Currency, Metadata: metadata, PaymentIntent: ptr(p.ID), Status: refundSucceeded, seq: s.seq}
		if fault == FaultRefundPending {
			rf.Status = refundPending
		}
		s.refunds[rf.ID] = rf
		p.refunded += amount
		s.event("refund.created", copyRefund(rf))
		if rf.Status == refundSucceeded {
			s.event("charge.refunded", s.chargeOf(p))
		}
		return answer{http.StatusOK, encode(rf)}
	}, nil
}

// chargeOf is p's latest charge, as charge.refunded carries it; under s.mu.
func (s *Server) chargeOf(p *paymentIntent) *charge {
	id := ""
	if p.LatestCharge != nil {
		id = *p.LatestCharge
	}
	return &charge{ID: id, Object: "charge", Amount: p.Amount, AmountCaptured: p.AmountReceived, AmountRefunded: p.refunded, Captured: true, Created: p.Created,
		Currency: p.Currency, Metadata: copyMap(p.Metadata), Paid: true, PaymentIntent: ptr(p.ID),
		Refunded: p.refunded == p.AmountReceived, Status: "succeeded"}
}

// SettleRefund moves a pending refund on: succeeded, or failed (its amount
// free to be refunded again).
func (s *Server) SettleRefund(id string, succeed bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rf, ok := s.refunds[id]
	if !ok || rf.Status != refundPending {
		return fmt.Errorf("refund %q is not pending", id)
	}
	rf.Status = refundSucceeded
	if !succeed {
		rf.Status, rf.FailureReason = refundFailed, ptr("declined")
		s.intents[*rf.PaymentIntent].refunded -= rf.Amount
	}
	s.event("refund.updated", copyRefund(rf))
	s.event("charge.refund.updated", copyRefund(rf))
	return nil
}

// RefundByMetadata is the id and status of the refund whose metadata[name]
// is value.
func (s *Server) RefundByMetadata(name, value string) (id, status string, amount int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rf := range s.refunds {
		if rf.Metadata[name] == value {
			return rf.ID, rf.Status, rf.Amount, true
		}
	}
	return "", "", 0, false
}

// retrieveRefund is GET /v1/refunds/{id}.
func (s *Server) retrieveRefund(r *http.Request, _ url.Values) (answer, *refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rf, ok := s.refunds[r.PathValue("id")]
	if !ok {
		return answer{}, missing("refund", "No such refund: '"+r.PathValue("id")+"'")
	}
	return answer{http.StatusOK, encode(rf)}, nil
}

// listRefunds is GET /v1/refunds, of one PaymentIntent or all, newest
// first.
func (s *Server) listRefunds(_ *http.Request, q url.Values) (answer, *refusal) {
	f := newForm(q, "payment_intent", "charge", "created", "limit", "starting_after", "ending_before", "expand")
	inWindow := f.created()
	pg := f.page()
	piID := f.str("payment_intent")
	if f.bad != nil {
		return answer{}, f.bad
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.intents[piID]; piID != "" && !ok {
		return answer{}, missing("payment_intent", "No such payment_intent: '"+piID+"'")
	}
	var all []*refund
	for _, rf := range s.refunds {
		if inWindow(rf.Created) && (piID == "" || *rf.PaymentIntent == piID) {
			all = append(all, rf)
		}
	}
	newestFirst(all, func(r *refund) (int64, int64) { return r.Created, r.seq })
	items, more := paged(all, func(r *refund) string { return r.ID }, pg)
	data := make([]any, len(items))
	for i, rf := range items {
		data[i] = copyRefund(rf)
	}
	return answer{http.StatusOK, encode(list{Object: "list", Data: data, HasMore: more, URL: "/v1/refunds"})}, nil
}
