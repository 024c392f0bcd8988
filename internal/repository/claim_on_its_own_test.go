package repository_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/repository"
)

// Phase 1 on its own (decision 0015) commits in one round trip only the usual
// answer: the key claimed, with a PENDING payment to charge; or a record in
// the claim's way, read first, for which it writes and locks nothing. Every
// other answer must leave the tables as they were, reservation and claim
// alike, and say ErrClaimNeedsTransaction, so that the use case runs it
// again in a transaction.
func TestClaimOnItsOwnCommitsOnlyTheUsualAnswer(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	store := repository.NewTransactor(db, repository.WithOutbox(repository.OutboxConfig{PaymentEventsTopic: "payment.events"})).AutoCommit().Charges
	ctx := context.Background()
	claimOnItsOwn := func(key, hash string, token uuid.UUID, lockFor time.Duration, charge domain.Charge) (app.ChargeClaimed, error) {
		return store.Claim(ctx, app.KeyClaim{
			Scope: app.IdempotencyScope{ClientID: "demo-client", Key: key}, CommandHash: hash,
			Token: token, LockFor: lockFor}, charge)
	}
	mustClaim := func(t *testing.T, key, hash string, lockFor time.Duration, charge domain.Charge) app.ChargeClaimed {
		t.Helper()
		res, err := claimOnItsOwn(key, hash, uuid.New(), lockFor, charge)
		if err != nil {
			t.Fatalf("claim %s: %v", key, err)
		}
		return res
	}

	for i, tc := range []struct {
		name string
		// before makes the tables the case needs, on order; it returns the
		// payment the claim must go on with (0: the claim must roll back).
		before   func(t *testing.T, order int64) (key, hash string, charge domain.Charge, resumes int64)
		reserved bool
		stands   string // the hash of the record in the claim's way, answered with
	}{
		{
			name: "a new key for a matching order is claimed and reserved",
			before: func(t *testing.T, order int64) (string, string, domain.Charge, int64) {
				addOrder(t, db, order, "10.00")
				return "new", "h", newCharge(t, order, "10.00", "pi_new"), -1
			},
			reserved: true,
		},
		{
			name: "an expired claim of the same command is taken over, with its payment",
			before: func(t *testing.T, order int64) (string, string, domain.Charge, int64) {
				addOrder(t, db, order, "10.00")
				charge := newCharge(t, order, "10.00", "pi_takeover")
				first := mustClaim(t, "takeover", "h", time.Microsecond, charge)
				time.Sleep(5 * time.Millisecond)
				return "takeover", "h", charge, int64(first.Payment.ID)
			},
		},
		{
			name: "an unknown order rolls back",
			before: func(t *testing.T, order int64) (string, string, domain.Charge, int64) {
				return "unknown-order", "h", newCharge(t, order, "10.00", "pi_unknown"), 0
			},
		},
		{
			name: "an order of another amount rolls back",
			before: func(t *testing.T, order int64) (string, string, domain.Charge, int64) {
				addOrder(t, db, order, "99.00")
				return "mismatch", "h", newCharge(t, order, "10.00", "pi_mismatch"), 0
			},
		},
		{
			name: "a key held by a live claim of another command: its record, nothing reserved",
			before: func(t *testing.T, order int64) (string, string, domain.Charge, int64) {
				addOrder(t, db, order, "10.00")
				mustClaim(t, "held", "h", time.Minute, newCharge(t, order, "10.00", "pi_held"))
				// Another command under the held key, for an order of its own
				// that would be reserved if the statement wrote anything.
				addOrder(t, db, order+1, "10.00")
				return "held", "other", newCharge(t, order+1, "10.00", "pi_held_other"), 0
			},
			stands: "h",
		},
		{
			name: "a key held by a live claim of the same command: its record",
			before: func(t *testing.T, order int64) (string, string, domain.Charge, int64) {
				addOrder(t, db, order, "10.00")
				charge := newCharge(t, order, "10.00", "pi_held_same")
				mustClaim(t, "held-same", "h", time.Minute, charge)
				return "held-same", "h", charge, 0
			},
			stands: "h",
		},
		{
			name: "a completed key: its record, nothing reserved",
			before: func(t *testing.T, order int64) (string, string, domain.Charge, int64) {
				if err := db.Exec(`INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, response, http_status)
VALUES ('demo-client', 'completed', 'charge', 'h', 'COMPLETED', '{"id": 1}', 201)`).Error; err != nil {
					t.Fatal(err)
				}
				addOrder(t, db, order, "10.00")
				return "completed", "h", newCharge(t, order, "10.00", "pi_completed"), 0
			},
			stands: "h",
		},
		{
			name: "a payment in the way rolls back",
			before: func(t *testing.T, order int64) (string, string, domain.Charge, int64) {
				addOrder(t, db, order, "10.00")
				charge := newCharge(t, order, "10.00", "pi_in_the_way")
				mustClaim(t, "first-key", "h", time.Minute, charge)
				return "second-key", "h", charge, 0
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			order := int64(7000 + 10*i) // a few orders of its own
			key, hash, charge, resumes := tc.before(t, order)
			recordsBefore := countRows(t, db, `SELECT count(*) FROM idempotency_record`)
			paymentsBefore := countRows(t, db, `SELECT count(*) FROM payment`)
			token := uuid.New()

			// A write or a row lock of the key's record changes its ctid or xmax.
			version := func() string {
				var v string
				if err := db.Raw(`SELECT coalesce((SELECT ctid::text || ' ' || xmax::text FROM idempotency_record WHERE idempotency_key = ?), '')`, key).Scan(&v).Error; err != nil {
					t.Fatal(err)
				}
				return v
			}
			recordBefore := version()

			res, err := claimOnItsOwn(key, hash, token, time.Minute, charge)

			if tc.stands != "" {
				if err != nil || res.Claimed || res.Reserved || res.Standing == nil || res.Standing.CommandHash != tc.stands {
					t.Fatalf("got %+v, %v; want the record of hash %q that stands in the way", res, err, tc.stands)
				}
				r, p := countRows(t, db, `SELECT count(*) FROM idempotency_record`), countRows(t, db, `SELECT count(*) FROM payment`)
				if r != recordsBefore || p != paymentsBefore || version() != recordBefore {
					t.Errorf("records %d -> %d, payments %d -> %d, the key's record %q -> %q: the answer wrote or locked something",
						recordsBefore, r, paymentsBefore, p, recordBefore, version())
				}
				return
			}
			if resumes == 0 {
				if !errors.Is(err, app.ErrClaimNeedsTransaction) {
					t.Fatalf("got %+v, %v; want ErrClaimNeedsTransaction", res, err)
				}
				if r, p := countRows(t, db, `SELECT count(*) FROM idempotency_record`), countRows(t, db, `SELECT count(*) FROM payment`); r != recordsBefore || p != paymentsBefore {
					t.Errorf("records %d -> %d, payments %d -> %d: a rolled-back claim left rows", recordsBefore, r, paymentsBefore, p)
				}
				if n := countRows(t, db, `SELECT count(*) FROM idempotency_record WHERE lock_token = ?`, token); n != 0 {
					t.Errorf("the rolled-back claim's token is on %d records", n)
				}
				return
			}
			if err != nil || !res.Claimed || res.Reserved != tc.reserved || res.Payment == nil || res.Payment.Status != domain.PaymentPending {
				t.Fatalf("got %+v, %v; want claimed, reserved %v, a PENDING payment", res, err, tc.reserved)
			}
			if resumes > 0 && int64(res.Payment.ID) != resumes {
				t.Errorf("took over with payment %d, want the recovery point %d", res.Payment.ID, resumes)
			}
			if n := countRows(t, db, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = ? AND lock_token = ? AND payment_id = ?`, key, token, int64(res.Payment.ID)); n != 1 {
				t.Errorf("the claim did not commit with its token and recovery point")
			}
		})
	}
}
