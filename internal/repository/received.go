package repository

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// The statements of modifications a provider received and decides later
// (db/migrations/00026_modifications_received.sql): the receipt, phase 3
// of a capture, void or refund answered "received" (the key completed
// with the 202, the reservation left PENDING and awaiting the provider);
// the settlement its event or a lookup brings, with no key to complete;
// and the list of those still awaiting, for the completer's lookups and
// the reconciliation.
var (
	//go:embed statements/transition_receive.sql
	receiveTransitionSQL string
	//go:embed statements/refund_receive.sql
	receiveRefundSQL string
	//go:embed statements/transition_settle_received.sql
	settleReceivedTransitionSQL string
	//go:embed statements/refund_settle_received.sql
	settleReceivedRefundSQL string
	//go:embed statements/transition_list_received.sql
	listReceivedTransitionsSQL string
	//go:embed statements/refund_list_received.sql
	listReceivedRefundsSQL string
)

var (
	receiveTransitionStmt        = compileNamed(receiveTransitionSQL)
	receiveRefundStmt            = compileNamed(receiveRefundSQL)
	settleReceivedTransitionStmt = compileNamed(settleReceivedTransitionSQL)
	settleReceivedRefundStmt     = compileNamed(settleReceivedRefundSQL)
	listReceivedTransitionsStmt  = compileNamed(listReceivedTransitionsSQL)
	listReceivedRefundsStmt      = compileNamed(listReceivedRefundsSQL)
)

// RecordReceived implements app.TransitionStore: receiveTransitionSQL.
func (s *TransitionStore) RecordReceived(ctx context.Context, k app.KeyClaim, resp app.StoredResponse, t domain.TransitionID) error {
	status, err := s.recordFenced(ctx, receiveTransitionStmt, k.Scope, k.Token, resp, map[string]any{"transition": int64(t)})
	if errors.Is(err, errNotPending) {
		return fmt.Errorf("record the receipt of transition %d: it is %s, not PENDING", t, status)
	}
	return err
}

// RecordReceived implements app.RefundStore: receiveRefundSQL.
func (s *RefundStore) RecordReceived(ctx context.Context, k app.KeyClaim, resp app.StoredResponse, refund domain.RefundID) error {
	status, err := s.recordFenced(ctx, receiveRefundStmt, k.Scope, k.Token, resp, map[string]any{"refund": int64(refund)})
	if errors.Is(err, errNotPending) {
		return fmt.Errorf("record the receipt of refund %d: it is %s, not PENDING", refund, status)
	}
	return err
}

// SettleReceived implements app.TransitionStore: settleReceivedTransitionSQL.
func (s *TransitionStore) SettleReceived(ctx context.Context, paymentStatus domain.PaymentStatus, e app.PaymentEvent) (bool, error) {
	ev, err := newPaymentOutboxRow(ctx, e, s.outbox)
	if err != nil {
		return false, err
	}
	t := e.Transition
	return s.settleReceived(ctx, settleReceivedTransitionStmt, ev, map[string]any{
		"transition": int64(t.ID), "status": string(t.Status), "payment_status": string(paymentStatus),
	})
}

// SettleReceived implements app.RefundStore: settleReceivedRefundSQL.
func (s *RefundStore) SettleReceived(ctx context.Context, e app.RefundEvent) (bool, error) {
	ev, err := newRefundOutboxRow(ctx, e, s.outbox)
	if err != nil {
		return false, err
	}
	return s.settleReceived(ctx, settleReceivedRefundStmt, ev, map[string]any{
		"refund": int64(e.Refund.ID), "status": string(e.Refund.Status),
	})
}

// settleReceived runs a settlement statement q, which answers whether it
// settled, and the reservation's status and whether it awaited the
// provider before; ev is its outbox row. app.ErrNotReceived when the
// reservation is PENDING and never awaited the provider.
func (c conn) settleReceived(ctx context.Context, q namedSQL, ev outboxEventRow, values map[string]any) (settled bool, err error) {
	ev.addTo(values)
	var awaiting bool
	var before sql.NullString
	err = c.run(ctx, func(db *gorm.DB) error {
		row, err := queryRow(ctx, db, q, values)
		if err != nil {
			return err
		}
		return row.Scan(&settled, &before, &awaiting)
	})
	switch {
	case err != nil:
		return false, fmt.Errorf("settle a received modification: %w", err)
	case settled:
		c.outbox.wrote()
	case before.String == string(domain.PaymentPending) && !awaiting:
		return false, app.ErrNotReceived
	}
	// Not settled here: another settlement (the event delivered twice, or
	// the event and a lookup) came first.
	return settled, nil
}

// ListReceived implements app.TransitionStore: listReceivedTransitionsSQL.
func (s *TransitionStore) ListReceived(ctx context.Context, olderThan time.Duration, limit int) ([]app.ReceivedModification, error) {
	var out []app.ReceivedModification
	err := s.run(ctx, func(db *gorm.DB) error {
		return queryRows(ctx, db, listReceivedTransitionsStmt, map[string]any{"micros": olderThan.Microseconds(), "limit": limit}, func(r row) error {
			var m app.ReceivedModification
			var kind, provider string
			if err := r.Scan(&kind, &provider, &m.ProviderKey, &m.ReceivedAt); err != nil {
				return err
			}
			m.Object, m.Provider = app.ProviderObject(kind), domain.ProviderName(provider)
			out = append(out, m)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list received transitions: %w", err)
	}
	return out, nil
}

// ListReceived implements app.RefundStore: listReceivedRefundsSQL.
func (s *RefundStore) ListReceived(ctx context.Context, olderThan time.Duration, limit int) ([]app.ReceivedModification, error) {
	var out []app.ReceivedModification
	err := s.run(ctx, func(db *gorm.DB) error {
		return queryRows(ctx, db, listReceivedRefundsStmt, map[string]any{"micros": olderThan.Microseconds(), "limit": limit}, func(r row) error {
			var provider, external string
			m := app.ReceivedModification{Object: app.ObjectRefund}
			if err := r.Scan(&provider, &external, &m.ReceivedAt); err != nil {
				return err
			}
			m.Provider = domain.ProviderName(provider)
			m.ProviderKey = domain.Refund{Provider: m.Provider, ExternalRefundID: domain.ExternalRefundID(external)}.ProviderIdempotencyKey()
			out = append(out, m)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list received refunds: %w", err)
	}
	return out, nil
}
