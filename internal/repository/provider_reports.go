package repository

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// ProviderReports implements app.ProviderReports: what a provider's event
// (a webhook) is about, read inside the transaction that applies it.
type ProviderReports struct {
	conn
}

// reportedClaimColumns are the claim an event about a PENDING object
// records under: its IN_PROGRESS record, found by its recovery point
// (the partial indexes ix_idempotency_record_payment_in_progress,
// ..._refund_in_progress and ..._transition_in_progress). NULL when the key
// is completed.
//
// Each index holds only the claims whose recovery point its column is
// (migration 00023), and PostgreSQL reads it only for a query that implies
// its predicate: the join's "r.<column> = <id>" implies "<column> IS NOT
// NULL", and the charge's 'charge', a literal, its command, in generic
// plans too. A parameter in its place, or a join that no longer compares
// the column, would leave the index unread (TestClaimReadersUseTheirIndexes).
const reportedClaimColumns = `r.client_id, r.idempotency_key, r.command_hash, r.lock_token`

// reportedChargeSQL reads the payment an event names by its provider key
// (the UNIQUE pair of R-DIST-IDEM-4), its order's saga, and its claim: the
// charge's own, as a refund's record names its payment too.
var reportedChargeSQL = compileNamed(`
SELECT p.id, ` + paymentColumns("p") + `,
       o.saga_id, ` + reportedClaimColumns + `
  FROM payment p
  LEFT JOIN order_projection o ON o.order_id = p.order_id
  LEFT JOIN idempotency_record r ON r.payment_id = p.id AND r.status = 'IN_PROGRESS' AND r.command = '` + string(app.CommandCharge) + `'
 WHERE p.payment_provider = @provider AND p.external_payment_id = @external`)

// reportedRefundSQL reads the refund an event names by its provider key
// (refund_provider_external_refund_id_key), its payment, the order's saga,
// and its claim.
var reportedRefundSQL = compileNamed(`
SELECT f.id, f.payment_id, f.client_id, f.payment_provider, f.external_refund_id, f.amount, f.currency, f.status,
       p.id, ` + paymentColumns("p") + `,
       o.saga_id, ` + reportedClaimColumns + `
  FROM refund f
  JOIN payment p ON p.id = f.payment_id
  LEFT JOIN order_projection o ON o.order_id = p.order_id
  LEFT JOIN idempotency_record r ON r.refund_id = f.id AND r.status = 'IN_PROGRESS'
 WHERE f.payment_provider = @provider AND f.external_refund_id = @external`)

// reportedTransitionSQL reads the capture or void an event names by the
// provider key it was sent under: the PENDING one if any (a declined void
// and the next void of a payment share a key), else the latest; its
// payment, the order's saga, and its claim.
var reportedTransitionSQL = compileNamed(`
SELECT t.id, t.payment_id, t.kind, t.amount, t.currency, t.reference, t.status,
       p.id, ` + paymentColumns("p") + `,
       o.saga_id, ` + reportedClaimColumns + `
  FROM payment_transition t
  JOIN payment p ON p.id = t.payment_id
  LEFT JOIN order_projection o ON o.order_id = p.order_id
  LEFT JOIN idempotency_record r ON r.transition_id = t.id AND r.status = 'IN_PROGRESS'
 WHERE t.provider_key = @key
 ORDER BY t.status = 'PENDING' DESC, t.id DESC
 LIMIT 1`)

// keepContradictionSQL keeps an event that contradicts the record, once.
var keepContradictionSQL = compileNamed(`
INSERT INTO provider_event_contradiction (consumer_name, event_id, event_type, provider_key, recorded_status, reason, event)
VALUES (@consumer, @event_id, @event_type, @provider_key, @recorded_status, @reason, CAST(@event AS json))
    ON CONFLICT (consumer_name, event_id) DO NOTHING`)

// reportedClaim is reportedClaimColumns as scanned.
type reportedClaim struct {
	clientID, key, hash sql.NullString
	token               uuid.NullUUID
}

func (c *reportedClaim) targets() []any {
	return []any{&c.clientID, &c.key, &c.hash, &c.token}
}

// record is the claim, or nil when there is none in progress.
func (c reportedClaim) record() *app.IdempotencyRecord {
	if !c.key.Valid {
		return nil
	}
	return &app.IdempotencyRecord{
		Scope:       app.IdempotencyScope{ClientID: domain.ClientID(c.clientID.String), Key: c.key.String},
		CommandHash: c.hash.String,
		Status:      app.RecordInProgress,
		LockToken:   c.token.UUID,
	}
}

func (s *ProviderReports) Charge(ctx context.Context, provider domain.ProviderName, external domain.ExternalPaymentID) (app.ReportedCharge, bool, error) {
	row, err := queryRow(ctx, s.db, reportedChargeSQL, map[string]any{"provider": string(provider), "external": string(external)})
	if err != nil {
		return app.ReportedCharge{}, false, err
	}
	var (
		p     nullablePaymentRow
		rep   app.ReportedCharge
		claim reportedClaim
	)
	err = row.Scan(append(append(p.targets(), &rep.Saga), claim.targets()...)...)
	if errors.Is(err, sql.ErrNoRows) {
		return app.ReportedCharge{}, false, nil
	}
	if err != nil {
		return app.ReportedCharge{}, false, mapError(fmt.Errorf("read the payment an event names: %w", err))
	}
	if rep.Payment, err = p.toDomain(); err != nil {
		return app.ReportedCharge{}, false, err
	}
	rep.Claim = claim.record()
	return rep, true, nil
}

func (s *ProviderReports) Refund(ctx context.Context, provider domain.ProviderName, external domain.ExternalRefundID) (app.ReportedRefund, bool, error) {
	row, err := queryRow(ctx, s.db, reportedRefundSQL, map[string]any{"provider": string(provider), "external": string(external)})
	if err != nil {
		return app.ReportedRefund{}, false, err
	}
	var (
		f     nullableRefundRow
		p     nullablePaymentRow
		rep   app.ReportedRefund
		claim reportedClaim
	)
	err = row.Scan(append(append(append(f.targets(), p.targets()...), &rep.Saga), claim.targets()...)...)
	if errors.Is(err, sql.ErrNoRows) {
		return app.ReportedRefund{}, false, nil
	}
	if err != nil {
		return app.ReportedRefund{}, false, mapError(fmt.Errorf("read the refund an event names: %w", err))
	}
	if rep.Refund, _, err = f.toDomain(); err != nil {
		return app.ReportedRefund{}, false, err
	}
	if rep.Payment, err = p.toDomain(); err != nil {
		return app.ReportedRefund{}, false, err
	}
	rep.Claim = claim.record()
	return rep, true, nil
}

func (s *ProviderReports) Transition(ctx context.Context, providerKey string) (app.ReportedTransition, bool, error) {
	row, err := queryRow(ctx, s.db, reportedTransitionSQL, map[string]any{"key": providerKey})
	if err != nil {
		return app.ReportedTransition{}, false, err
	}
	var (
		t     nullableTransitionRow
		p     nullablePaymentRow
		rep   app.ReportedTransition
		claim reportedClaim
	)
	err = row.Scan(append(append(append(t.targets(), p.targets()...), &rep.Saga), claim.targets()...)...)
	if errors.Is(err, sql.ErrNoRows) {
		return app.ReportedTransition{}, false, nil
	}
	if err != nil {
		return app.ReportedTransition{}, false, mapError(fmt.Errorf("read the transition an event names: %w", err))
	}
	if rep.Transition, err = t.toDomain(); err != nil {
		return app.ReportedTransition{}, false, err
	}
	if rep.Payment, err = p.toDomain(); err != nil {
		return app.ReportedTransition{}, false, err
	}
	rep.Claim = claim.record()
	return rep, true, nil
}

func (s *ProviderReports) KeepContradiction(ctx context.Context, c app.Contradiction) error {
	args, err := keepContradictionSQL.args(map[string]any{
		"consumer":        c.Consumer,
		"event_id":        c.Event.ID,
		"event_type":      c.Event.Type,
		"provider_key":    c.Event.ProviderKey,
		"recorded_status": string(c.RecordedStatus),
		"reason":          c.Reason,
		"event":           string(c.Event.Raw),
	})
	if err != nil {
		return err
	}
	return s.run(ctx, func(db *gorm.DB) error {
		if _, err := db.Statement.ConnPool.ExecContext(ctx, keepContradictionSQL.text, args...); err != nil {
			return fmt.Errorf("keep a contradicting event: %w", err)
		}
		return nil
	})
}

var _ app.ProviderReports = (*ProviderReports)(nil)
