package repository_test

import (
	"testing"
)

// The hot path's updates of a payment are HOT (heap-only: no index is
// written again): a charge's record sets status and updated_at, a refund's
// reservation and give-back set refund_reserved. An index that reads any of
// those columns, in its key or its predicate, would make every one of them
// write every index of the table; the partial indexes read generated
// columns instead (holds_order, is_authorized), whose values these updates
// keep. The row is inserted and updated in one transaction, and the
// backend's own counters, read before and after, say whether the update
// was HOT.
func TestThePaymentsHotPathUpdatesAreHOT(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	cases := []struct {
		name, status, set string
	}{
		{"a charge approved", "PENDING", "status = 'SUCCEEDED', updated_at = now()"},
		{"a charge whose provider keeps the outcome unknown, then approved late", "PENDING", "status = 'SUCCEEDED', updated_at = now() + interval '1 day'"},
		{"a refund reserved", "SUCCEEDED", "refund_reserved = refund_reserved + 1"},
		{"a captured payment's refund reserved", "SUCCEEDED", "refund_reserved = refund_reserved + 1, updated_at = now()"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tx := db.Begin()
			defer tx.Rollback()
			var id int64
			if err := tx.Raw(`INSERT INTO payment (client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status)
				VALUES ('hot', ?, 42, 'sandbox', ?, 10, 'RUB', ?) RETURNING id`, 7000+i, c.name, c.status).Scan(&id).Error; err != nil {
				t.Fatal(err)
			}
			counters := func() (updated, hot int64) {
				if err := tx.Raw(`SELECT pg_stat_get_xact_tuples_updated('payment'::regclass), pg_stat_get_xact_tuples_hot_updated('payment'::regclass)`).
					Row().Scan(&updated, &hot); err != nil {
					t.Fatal(err)
				}
				return updated, hot
			}
			updatedBefore, hotBefore := counters()
			if err := tx.Exec(`UPDATE payment SET `+c.set+` WHERE id = ?`, id).Error; err != nil {
				t.Fatal(err)
			}
			updated, hot := counters()
			if updated, hot = updated-updatedBefore, hot-hotBefore; updated != 1 || hot != 1 {
				t.Fatalf("updates %d, HOT %d: want the one update HOT", updated, hot)
			}
		})
	}
}
