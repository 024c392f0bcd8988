package repository

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shopspring/decimal"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// Reconciliation implements app.ReconciliationStore: our side of the
// books, read for a window, and the runs and items reconciling them finds
// (00027). Its statements run on the pool, each its own transaction, but
// for a run's writes, which are one (SaveRun).
type Reconciliation struct {
	db *gorm.DB
}

// NewReconciliation returns the reconciliation adapter.
func NewReconciliation(db *gorm.DB) *Reconciliation { return &Reconciliation{db: db} }

var (
	//go:embed statements/reconcile_payments_in_window.sql
	reconcilePaymentsInWindowSQL string
	//go:embed statements/reconcile_refunds_in_window.sql
	reconcileRefundsInWindowSQL string
	//go:embed statements/reconcile_payments_by_ref.sql
	reconcilePaymentsByRefSQL string
	//go:embed statements/reconcile_refunds_by_ref.sql
	reconcileRefundsByRefSQL string
	//go:embed statements/reconcile_item_upsert.sql
	reconcileItemUpsertSQL string
	//go:embed statements/reconcile_item_close.sql
	reconcileItemCloseSQL string
)

var (
	reconcilePaymentsInWindowStmt = compileNamed(reconcilePaymentsInWindowSQL)
	reconcileRefundsInWindowStmt  = compileNamed(reconcileRefundsInWindowSQL)
	reconcilePaymentsByRefStmt    = compileNamed(reconcilePaymentsByRefSQL)
	reconcileRefundsByRefStmt     = compileNamed(reconcileRefundsByRefSQL)
	reconcileItemUpsertStmt       = compileNamed(reconcileItemUpsertSQL)
	reconcileItemCloseStmt        = compileNamed(reconcileItemCloseSQL)
)

// The run's own statements, short enough to sit beside their Go.
const (
	// reconcileLockSQL serializes the runs' writes across replicas, for
	// the transaction's length: two runs' items are written one run after
	// the other, never interleaved (and never deadlocked).
	reconcileLockSQL = `SELECT pg_advisory_xact_lock(@lock)`
	// reconcileRunInsertSQL keeps a run.
	reconcileRunInsertSQL = `
INSERT INTO reconciliation_run (window_from, window_to, started_at, finished_at, status, error, movements, payouts,
                                payments, refunds, matched, found, expected, opened, closed)
VALUES (@from, @to, @started, clock_timestamp(), @status, @error, @movements, @payouts,
        @payments, @refunds, @matched, @found, @expected, @opened, 0)
RETURNING id, finished_at`
	// reconcileRunClosedSQL records how many items the run closed.
	reconcileRunClosedSQL = `UPDATE reconciliation_run SET closed = @closed WHERE id = @run`
	// reconcileOpenItemsSQL reads the open items over
	// ix_reconciliation_item_open.
	reconcileOpenItemsSQL = `SELECT ` + itemColumns + ` FROM reconciliation_item i WHERE i.status = 'open' ORDER BY i.class, i.id`
)

// itemColumns are an item's columns in the order of itemRow.targets.
const itemColumns = `i.id, i.key, i.class, i.subject, i.ref, coalesce(i.payment_id, 0), coalesce(i.refund_id, 0), i.provider_id,
       i.ours, i.our_currency, i.theirs, i.their_currency, i.detail, i.status, i.first_run_id, i.last_run_id,
       coalesce(i.closed_run_id, 0), i.first_seen_at, i.last_seen_at, i.closed_at`

// runColumns are a run's columns in the order of runRow.targets.
const runColumns = `r.id, r.window_from, r.window_to, r.started_at, r.finished_at, r.status, coalesce(r.error, ''),
       r.movements, r.payouts, r.payments, r.refunds, r.matched, r.found, r.expected, r.opened, r.closed`

var (
	reconcileLockStmt      = compileNamed(reconcileLockSQL)
	reconcileRunInsertStmt = compileNamed(reconcileRunInsertSQL)
	reconcileRunClosedStmt = compileNamed(reconcileRunClosedSQL)
	reconcileOpenItemsStmt = compileNamed(reconcileOpenItemsSQL)
)

// reconcileLockKey is the advisory lock the runs' writes take
// ("reconcil" in ASCII); the jobs' leader lock is another key.
const reconcileLockKey int64 = 0x7265636f6e63696c

// refsPerStatement bounds the refs one lookup by ref sends: a window's
// records the provider names but the window does not hold are few, but
// a backlog may name many.
const refsPerStatement = 10_000

// BookedInWindow implements app.ReconciliationStore: two statements over
// the BRIN indexes on created_at, payments and refunds, each streamed row
// by row.
func (s *Reconciliation) BookedInWindow(ctx context.Context, from, to time.Time) (app.OurBooks, error) {
	var books app.OurBooks
	window := map[string]any{"from": from, "to": to}
	err := queryRows(ctx, s.db, reconcilePaymentsInWindowStmt, window, func(r row) error {
		p, err := scanBookedPayment(r)
		books.Payments = append(books.Payments, p)
		return err
	})
	if err == nil {
		err = queryRows(ctx, s.db, reconcileRefundsInWindowStmt, window, func(r row) error {
			f, err := scanBookedRefund(r)
			books.Refunds = append(books.Refunds, f)
			return err
		})
	}
	if err != nil {
		return app.OurBooks{}, mapError(fmt.Errorf("read our books of [%s, %s): %w", from, to, err))
	}
	return books, nil
}

// BookedByRef implements app.ReconciliationStore. A ref that is no
// provider key of ours (a movement made outside the service under a
// reference of its own) names nothing.
func (s *Reconciliation) BookedByRef(ctx context.Context, paymentRefs, refundRefs []string) (app.OurBooks, error) {
	var books app.OurBooks
	for _, chunk := range chunks(paymentRefs, refsPerStatement) {
		providers, externals := splitRefs(chunk, "")
		err := queryRows(ctx, s.db, reconcilePaymentsByRefStmt, map[string]any{"providers": providers, "externals": externals}, func(r row) error {
			p, err := scanBookedPayment(r)
			books.Payments = append(books.Payments, p)
			return err
		})
		if err != nil {
			return app.OurBooks{}, mapError(fmt.Errorf("read our payments by ref: %w", err))
		}
	}
	for _, chunk := range chunks(refundRefs, refsPerStatement) {
		providers, externals := splitRefs(chunk, refundKeyPrefix)
		err := queryRows(ctx, s.db, reconcileRefundsByRefStmt, map[string]any{"providers": providers, "externals": externals}, func(r row) error {
			f, err := scanBookedRefund(r)
			books.Refunds = append(books.Refunds, f)
			return err
		})
		if err != nil {
			return app.OurBooks{}, mapError(fmt.Errorf("read our refunds by ref: %w", err))
		}
	}
	return books, nil
}

// refundKeyPrefix starts a refund's provider key
// (domain.Refund.ProviderIdempotencyKey).
var refundKeyPrefix = strings.TrimSuffix(domain.Refund{Provider: "p", ExternalRefundID: "e"}.ProviderIdempotencyKey(), "p:e")

// splitRefs splits provider keys (prefix, the provider's name, ":", our
// external id) into the provider names and external ids they carry; a ref
// of another shape is left out.
func splitRefs(refs []string, prefix string) (providers, externals []string) {
	for _, ref := range refs {
		rest, ok := strings.CutPrefix(ref, prefix)
		provider, external, found := strings.Cut(rest, ":")
		if ok && found && provider != "" && external != "" {
			providers, externals = append(providers, provider), append(externals, external)
		}
	}
	return providers, externals
}

func chunks(refs []string, size int) [][]string {
	var out [][]string
	for len(refs) > 0 {
		n := min(size, len(refs))
		out = append(out, refs[:n])
		refs = refs[n:]
	}
	return out
}

func scanBookedPayment(r row) (app.BookedPayment, error) {
	var (
		p                  app.BookedPayment
		provider, external string
		amount             decimal.Decimal
		captured           decimal.NullDecimal
		currency           string
	)
	if err := r.Scan(&p.ID, &provider, &external, &p.Status, &amount, &captured, &currency, &p.CreatedAt, &p.DecidedAt); err != nil {
		return p, err
	}
	p.Ref = domain.Charge{Provider: domain.ProviderName(provider), ExternalPaymentID: domain.ExternalPaymentID(external)}.ProviderIdempotencyKey()
	p.Currency = strings.TrimSpace(currency)
	p.Taken = decimal.Zero
	if p.Status == domain.PaymentSucceeded {
		p.Taken = amount
		if captured.Valid {
			p.Taken = captured.Decimal
		}
	}
	return p, nil
}

func scanBookedRefund(r row) (app.BookedRefund, error) {
	var (
		f                                app.BookedRefund
		provider, external               string
		paymentProvider, paymentExternal string
		currency                         string
	)
	if err := r.Scan(&f.ID, &provider, &external, &paymentProvider, &paymentExternal, &f.Status, &f.Amount, &currency,
		&f.CreatedAt, &f.DecidedAt); err != nil {
		return f, err
	}
	f.Ref = domain.Refund{Provider: domain.ProviderName(provider), ExternalRefundID: domain.ExternalRefundID(external)}.ProviderIdempotencyKey()
	f.PaymentRef = domain.Charge{Provider: domain.ProviderName(paymentProvider), ExternalPaymentID: domain.ExternalPaymentID(paymentExternal)}.ProviderIdempotencyKey()
	f.Currency = strings.TrimSpace(currency)
	return f, nil
}

// OpenItems implements app.ReconciliationStore over the partial index of
// the open items.
func (s *Reconciliation) OpenItems(ctx context.Context) ([]app.ReconciliationItem, error) {
	items, err := scanItems(ctx, s.db, reconcileOpenItemsStmt, map[string]any{})
	if err != nil {
		return nil, mapError(fmt.Errorf("read the open reconciliation items: %w", err))
	}
	return items, nil
}

func scanItems(ctx context.Context, db *gorm.DB, q namedSQL, values map[string]any) ([]app.ReconciliationItem, error) {
	var items []app.ReconciliationItem
	err := queryRows(ctx, db, q, values, func(r row) error {
		var (
			it     app.ReconciliationItem
			status string
			closed *time.Time
		)
		if err := r.Scan(&it.ID, &it.Key, &it.Class, &it.Subject, &it.Ref, &it.PaymentID, &it.RefundID, &it.ProviderID,
			&it.Ours, &it.OurCurrency, &it.Theirs, &it.TheirCurrency, &it.Detail, &status, &it.FirstRun, &it.LastRun,
			&it.ClosedRun, &it.FirstSeen, &it.LastSeen, &closed); err != nil {
			return err
		}
		it.Open = status == "open"
		if closed != nil {
			it.Closed = *closed
		}
		items = append(items, it)
		return nil
	})
	return items, err
}

// SaveRun implements app.ReconciliationStore: the run, its items and
// their closings in one transaction, after the runs' lock, so a run is
// kept whole or not at all.
func (s *Reconciliation) SaveRun(ctx context.Context, run app.ReconciliationRun, found []app.Mismatch, closed []string) (app.ReconciliationRun, error) {
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if _, err := exec(ctx, tx, reconcileLockStmt, map[string]any{"lock": reconcileLockKey}); err != nil {
			return err
		}
		if err := insertRun(ctx, tx, &run); err != nil {
			return err
		}
		if len(found) > 0 {
			if _, err := exec(ctx, tx, reconcileItemUpsertStmt, itemValues(run, found)); err != nil {
				return err
			}
		}
		if len(closed) > 0 {
			n, err := exec(ctx, tx, reconcileItemCloseStmt, map[string]any{"keys": closed, "now": run.Started, "run": run.ID})
			if err != nil {
				return err
			}
			run.Closed = int(n)
			if _, err := exec(ctx, tx, reconcileRunClosedStmt, map[string]any{"closed": run.Closed, "run": run.ID}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return run, mapError(fmt.Errorf("keep reconciliation run: %w", err))
	}
	return run, nil
}

// SaveFailedRun implements app.ReconciliationStore: the run alone, with
// its error, and no item touched.
func (s *Reconciliation) SaveFailedRun(ctx context.Context, run app.ReconciliationRun) error {
	if run.Error == "" {
		return errors.New("a failed run needs its error")
	}
	return mapError(insertRun(ctx, s.db, &run))
}

func insertRun(ctx context.Context, db *gorm.DB, run *app.ReconciliationRun) error {
	var errText *string
	if run.Status == app.RunFailed {
		errText = &run.Error
	}
	r, err := queryRow(ctx, db, reconcileRunInsertStmt, map[string]any{
		"from": run.From, "to": run.To, "started": run.Started, "status": run.Status, "error": errText,
		"movements": run.Movements, "payouts": run.Payouts, "payments": run.Payments, "refunds": run.Refunds,
		"matched": run.Matched, "found": run.Found, "expected": run.Expected, "opened": run.Opened,
	})
	if err == nil {
		err = r.Scan(&run.ID, &run.Finished)
	}
	if err != nil {
		return fmt.Errorf("insert reconciliation run: %w", err)
	}
	return nil
}

// itemValues are the upsert's parallel arrays.
func itemValues(run app.ReconciliationRun, found []app.Mismatch) map[string]any {
	n := len(found)
	var (
		keys, classes, subjects, refs, providerIDs = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		paymentIDs, refundIDs                      = make([]int64, n), make([]int64, n)
		ours, theirs                               = make([]string, n), make([]string, n)
		ourCurrencies, theirCurrencies, details    = make([]string, n), make([]string, n), make([]string, n)
	)
	for i, m := range found {
		keys[i], classes[i], subjects[i], refs[i], providerIDs[i] = m.Key, string(m.Class), string(m.Subject), m.Ref, m.ProviderID
		paymentIDs[i], refundIDs[i] = int64(m.PaymentID), int64(m.RefundID)
		ours[i], theirs[i] = m.Ours.String(), m.Theirs.String()
		ourCurrencies[i], theirCurrencies[i], details[i] = m.OurCurrency, m.TheirCurrency, m.Detail
	}
	return map[string]any{
		"run": run.ID, "now": run.Started,
		"keys": keys, "classes": classes, "subjects": subjects, "refs": refs, "payment_ids": paymentIDs,
		"refund_ids": refundIDs, "provider_ids": providerIDs, "ours": ours, "our_currencies": ourCurrencies,
		"theirs": theirs, "their_currencies": theirCurrencies, "details": details,
	}
}

var _ app.ReconciliationStore = (*Reconciliation)(nil)
