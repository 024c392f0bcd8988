package main

import (
	"context"
	"testing"
	"time"

	"github.com/example/payment-service/internal/servicetest"
	"github.com/example/payment-service/internal/testdb"
)

// The demo's reconciliation steps, against the real service and sandbox
// reconciling every second as make dev does every 10: a run finds the
// lost answer nobody asked about, the retry records it, the next run
// closes its item.
func TestDemoReconciliationFindsAndClosesALostAnswer(t *testing.T) {
	t.Parallel()
	svc := servicetest.Start(t, servicetest.Options{DSN: testdb.New(t), Env: map[string]string{
		"OPERATOR_CLIENTS": "demo-client", "RECONCILE_CRON": "* * * * * *", "RECONCILE_WINDOW": "1h",
		"RECONCILE_SETTLEMENT_LAG": "0s"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := svc.DB.Exec(ctx, `INSERT INTO order_projection (order_id, customer_id, amount, currency) VALUES (1001, 42, 100.50, 'RUB')`); err != nil {
		t.Fatal(err)
	}
	d, err := newDemo(svc.URL, "demo-secret", svc.Provider.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.reconciliation(ctx, 1001); err != nil {
		t.Fatalf("the reconciliation steps: %v", err)
	}
	if n := svc.Count(t, `SELECT count(*) FROM reconciliation_item WHERE status = 'closed' AND class = 'missing_in_service'`); n != 1 {
		t.Fatalf("%d closed missing_in_service items, want the lost answer's", n)
	}
}
