package stripefake

import "sort"

// Ledger is everything the fake holds, as a test that checks the service
// against Stripe's books reads it: the ground truth of the money, the way
// the sandbox provider's ledger is for the sandbox.
type Ledger struct {
	// PaymentIntents are every PaymentIntent made, in the order made.
	PaymentIntents []PaymentIntent
	// Refunds are every refund made, in the order made.
	Refunds []Refund
	// Executed counts, per Idempotency-Key, the POSTs that started
	// executing under it: what Stripe did, as opposed to what it replayed
	// or refused.
	Executed map[string]int
}

// Refund is a refund as tests read it.
type Refund struct {
	ID, PaymentIntent, Status, Currency string
	Amount                              int64
	Metadata                            map[string]string
}

// Ledger is a snapshot of what the fake holds now.
func (s *Server) Ledger() Ledger {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := Ledger{Executed: map[string]int{}}
	intents := make([]*paymentIntent, 0, len(s.intents))
	for _, p := range s.intents {
		intents = append(intents, p)
	}
	sort.Slice(intents, func(i, j int) bool { return intents[i].seq < intents[j].seq })
	for _, p := range intents {
		l.PaymentIntents = append(l.PaymentIntents, p.snapshot())
	}
	refunds := make([]*refund, 0, len(s.refunds))
	for _, r := range s.refunds {
		refunds = append(refunds, r)
	}
	sort.Slice(refunds, func(i, j int) bool { return refunds[i].seq < refunds[j].seq })
	for _, r := range refunds {
		l.Refunds = append(l.Refunds, Refund{ID: r.ID, PaymentIntent: *r.PaymentIntent, Status: r.Status, Currency: r.Currency,
			Amount: r.Amount, Metadata: copyMap(r.Metadata)})
	}
	for _, r := range s.requests {
		if r.Executed && r.IdempotencyKey != "" {
			l.Executed[r.IdempotencyKey]++
		}
	}
	return l
}
