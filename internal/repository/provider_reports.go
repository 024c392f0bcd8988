package repository

import (
	"context"
	"database/sql"
	_ "embed"
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

// The statements that read what a provider's event names, each with the
// claim in progress it records under (the clause reported_claim).
var (
	//go:embed statements/provider_event_charge.sql
	reportedChargeText string
	//go:embed statements/provider_event_refund.sql
	reportedRefundText string
	//go:embed statements/provider_event_transition.sql
	reportedTransitionText string
	//go:embed statements/provider_event_contradiction.sql
	keepContradictionText string
)

// reportedChargeSQL reads the payment an event names, reportedRefundSQL
// the refund, reportedTransitionSQL the capture or void; each with its
// payment, its order's saga and its claim in progress. keepContradictionSQL
// keeps an event that contradicts the record, once.
var (
	reportedChargeSQL     = compileNamed(reportedChargeText)
	reportedRefundSQL     = compileNamed(reportedRefundText)
	reportedTransitionSQL = compileNamed(reportedTransitionText)
	keepContradictionSQL  = compileNamed(keepContradictionText)
)

// reportedClaim is the clause reported_claim's columns as scanned.
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
	return s.run(ctx, func(db *gorm.DB) error {
		_, err := exec(ctx, db, keepContradictionSQL, map[string]any{
			"consumer":        c.Consumer,
			"event_id":        c.Event.ID,
			"event_type":      c.Event.Type,
			"provider_key":    c.Event.ProviderKey,
			"recorded_status": string(c.RecordedStatus),
			"reason":          c.Reason,
			"event":           string(c.Event.Raw),
		})
		if err != nil {
			return fmt.Errorf("keep a contradicting event: %w", err)
		}
		return nil
	})
}

var _ app.ProviderReports = (*ProviderReports)(nil)
