package repository

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/testdb"
)

// The outbox's two scans use their partial indexes on a table shaped like
// production's: two days of published rows waiting for retention and a
// small backlog of unpublished ones. The retention purge reads published
// rows by published_at (migration 00009) and the relay reads unpublished
// rows by id (migration 00008); without the indexes both are sequential
// scans of the whole table, every batch.
func TestOutboxScansUseTheirPartialIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testdb.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `
		INSERT INTO outbox_event (event_id, topic, message_key, event_type, payload, created_at, published_at)
		SELECT gen_random_uuid(), 'payment.events', (i % 1000)::text, 'PaymentSucceeded.v1', '{}',
		       now() - (i * interval '3 seconds'), CASE WHEN i > 1000 THEN now() - (i * interval '3 seconds') END
		  FROM generate_series(1, 60000) AS i;
		ANALYZE outbox_event`)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name  string
		sql   string
		args  []any
		index string
	}{
		{"retention purge", retentionStmts[app.TableOutboxEvent].text, []any{time.Now().Add(-24 * time.Hour), 5000}, "ix_outbox_event_published_at"},
		{"relay's pending rows", pendingSQL, []any{100}, "ix_outbox_event_unpublished"},
	}
	for _, tc := range tests {
		var plan []byte
		if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+tc.sql, tc.args...).Scan(&plan); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var indexes []string
		var walk func(node map[string]any)
		walk = func(node map[string]any) {
			if name, ok := node["Index Name"].(string); ok {
				indexes = append(indexes, name)
			}
			children, _ := node["Plans"].([]any)
			for _, c := range children {
				if m, ok := c.(map[string]any); ok {
					walk(m)
				}
			}
		}
		var doc []map[string]map[string]any
		if err := json.Unmarshal(plan, &doc); err != nil || len(doc) != 1 {
			t.Fatalf("%s: plan %s: %v", tc.name, plan, err)
		}
		walk(doc[0]["Plan"])
		found := false
		for _, name := range indexes {
			found = found || name == tc.index
		}
		if !found {
			t.Errorf("%s: plan uses %v, not %s:\n%s", tc.name, indexes, tc.index, indent(plan))
		}
	}
}

func indent(plan []byte) string {
	var v any
	_ = json.Unmarshal(plan, &v)
	b, _ := json.MarshalIndent(v, "", "  ")
	return strings.TrimSpace(string(b))
}
