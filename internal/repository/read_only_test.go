package repository_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/testdb"
)

// A write that reaches a server which takes no writes (a primary being
// demoted and restarted as a standby, reached in the moment before the
// routing stops sending connections to it) is refused with SQLSTATE 25006,
// and nothing is written: the database is unavailable for writes, 503 and
// retry, not a 500 the client must not retry. The failover suite's
// replicas pointed straight at a demoted primary answered 500.
func TestWriteOnAServerThatTakesNoWritesIsStoreUnavailable(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(testdb.New(t))
	if err != nil {
		t.Fatal(err)
	}
	// A session that takes no writes, as every session on a standby.
	q := u.Query()
	q.Set("options", "-cdefault_transaction_read_only=on")
	u.RawQuery = q.Encode()
	_, tx := openDBOn(t, u.String())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name  string
		write func() error
	}{
		{"on the pool", func() error {
			_, err := tx.AutoCommit().Orders.UpsertNewer(ctx, []app.OrderCreated{orderEvent(t, 9701, "1.00", time.Now())})
			return err
		}},
		{"in a transaction", func() error {
			return tx.Transact(ctx, func(ctx context.Context, r app.Repos) error {
				_, err := r.Orders.UpsertNewer(ctx, []app.OrderCreated{orderEvent(t, 9702, "1.00", time.Now())})
				return err
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.write(); !errors.Is(err, app.ErrStoreUnavailable) {
				t.Fatalf("got %v, want the database unavailable", err)
			}
		})
	}
}
