package repository_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// claimStepAndReserveSQL commits a saga step's row, its payment and its
// key together, and only when the row is new and the claim is the usual
// one. Every other answer leaves nothing: no row, no payment, no key, and
// no change to what stood.
func TestClaimStepCommitsTheRowOnlyWithTheUsualClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	cases := []struct {
		name   string
		before string // SQL run first, @saga the step's saga; the step is 'charge-payment', order 1, key 'step-key'
		order  int64  // projected as 10.00 unless 0
		claims bool
	}{
		{name: "a new step: row, payment and key", order: 1, claims: true},
		{name: "a tombstone in its name: nothing", order: 1,
			before: `INSERT INTO saga_step (saga_id, step_name, kind, content_hash) VALUES (@saga, 'charge-payment', 'tombstone', 'saga-tombstone')`},
		{name: "its row stands (a re-sent step): nothing", order: 1,
			before: `INSERT INTO saga_step (saga_id, step_name, kind, content_hash) VALUES (@saga, 'charge-payment', 'charge', 'h')`},
		{name: "its order not projected yet: nothing"},
		{name: "its key completed, its row purged: nothing", order: 1,
			before: `INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, response, http_status)
				VALUES ('saga', 'step-key', 'charge', 'h', 'COMPLETED', '{}', 201)`},
		{name: "its key held by a live claim, its row purged: nothing", order: 1,
			before: `INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until)
				VALUES ('saga', 'step-key', 'charge', 'h', 'IN_PROGRESS', gen_random_uuid(), now() + interval '1 minute')`},
		{name: "a payment of the order in the way: nothing", order: 1,
			before: `INSERT INTO payment (client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status)
				VALUES ('demo-client', 1, 42, 'sandbox', 'other', 10, 'RUB', 'SUCCEEDED')`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, tx := openDB(t)
			if tc.order != 0 {
				addOrder(t, db, tc.order, "10.00")
			}
			saga := uuid.New()
			if tc.before != "" {
				if err := db.Exec(strings.ReplaceAll(tc.before, "@saga", "'"+saga.String()+"'")).Error; err != nil {
					t.Fatal(err)
				}
			}
			count := func(query string) int {
				return countRows(t, db, strings.ReplaceAll(query, "@saga", "'"+saga.String()+"'"))
			}
			rows := count(`SELECT count(*) FROM saga_step WHERE saga_id = @saga`)
			keys := count(`SELECT count(*) FROM idempotency_record WHERE idempotency_key = 'step-key'`)
			payments := count(`SELECT count(*) FROM payment`)

			k := app.KeyClaim{Scope: app.IdempotencyScope{ClientID: "saga", Key: "step-key"}, CommandHash: "h", Token: uuid.New(), LockFor: time.Minute}
			res, err := tx.AutoCommit().Charges.ClaimStep(ctx, k, newCharge(t, 1, "10.00", "e1"), app.SagaStep{SagaID: saga, Name: "charge-payment"})
			if !tc.claims {
				if !errors.Is(err, app.ErrClaimNeedsTransaction) {
					t.Fatalf("ClaimStep: %+v %v, want ErrClaimNeedsTransaction", res, err)
				}
				after := []int{count(`SELECT count(*) FROM saga_step WHERE saga_id = @saga`),
					count(`SELECT count(*) FROM idempotency_record WHERE idempotency_key = 'step-key' AND lock_token IS DISTINCT FROM '` + k.Token.String() + `'`),
					count(`SELECT count(*) FROM payment`)}
				if after[0] != rows || after[1] != keys || after[2] != payments {
					t.Fatalf("rows, keys, payments %v after, %v before: the statement left something", after, []int{rows, keys, payments})
				}
				return
			}
			if err != nil || !res.Claimed || !res.Reserved || res.Payment == nil || res.Payment.Status != domain.PaymentPending {
				t.Fatalf("ClaimStep: %+v %v, want the key claimed with a new PENDING payment", res, err)
			}
			if n := count(`SELECT count(*) FROM saga_step WHERE saga_id = @saga AND step_name = 'charge-payment' AND kind = 'charge' AND content_hash = 'h'`); n != 1 {
				t.Errorf("%d rows of the step, want 1, a charge's with the command's hash", n)
			}
			if n := countRows(t, db, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = 'step-key' AND status = 'IN_PROGRESS' AND payment_id = ?`, int64(res.Payment.ID)); n != 1 {
				t.Errorf("%d claims of the key with the payment as recovery point, want 1", n)
			}
		})
	}

	t.Run("in a transaction: refused", func(t *testing.T) {
		t.Parallel()
		_, tx := openDB(t)
		err := tx.Transact(ctx, func(ctx context.Context, r app.Repos) error {
			_, err := r.Charges.ClaimStep(ctx, app.KeyClaim{Scope: app.IdempotencyScope{ClientID: "saga", Key: "k"}, CommandHash: "h", Token: uuid.New(), LockFor: time.Minute},
				newCharge(t, 1, "10.00", "e1"), app.SagaStep{SagaID: uuid.New(), Name: "charge-payment"})
			return err
		})
		if err == nil || errors.Is(err, app.ErrClaimNeedsTransaction) {
			t.Fatalf("ClaimStep in a transaction: %v, want a refusal", err)
		}
	})
}
