package main_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payment-service/internal/testdb"
)

// R-DIST-IDEM-5: an idempotency TTL outside 24-72 h stops the start, and the
// message names the variable and the rule.
func TestIdempotencyTTLOutsideTheRuleStopsTheStart(t *testing.T) {
	t.Parallel()
	for _, ttl := range []string{"12h", "96h"} {
		cmd := exec.Command(binary, "serve")
		cmd.Env = []string{"DATABASE_URL=postgres://x/y", "API_KEYS=demo-client:demo-secret", "IDEMPOTENCY_TTL=" + ttl}
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "IDEMPOTENCY_TTL:") || !strings.Contains(string(out), "R-DIST-IDEM-5") {
			t.Errorf("IDEMPOTENCY_TTL=%s: err=%v output %q, want a failure naming IDEMPOTENCY_TTL and R-DIST-IDEM-5", ttl, err, out)
		}
	}
}

// `payment-service cleanup` runs the jobs once: the expired record goes, the
// fresh one stays, and the run is logged with what it deleted.
func TestCleanupCommandRunsTheJobsOnce(t *testing.T) {
	t.Parallel()
	dsn := testdb.New(t)
	db, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = db.Exec(context.Background(), `
		INSERT INTO idempotency_record (client_id, idempotency_key, command_hash, status, response, http_status, created_at)
		VALUES ('c', 'expired', 'h', 'COMPLETED', '{}', 201, now() - interval '73 hours'),
		       ('c', 'fresh',   'h', 'COMPLETED', '{}', 201, now() - interval '71 hours')`)
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(binary, "cleanup")
	// No charge is abandoned here, so the provider is never called.
	cmd.Env = []string{"DATABASE_URL=" + dsn, "API_KEYS=demo-client:demo-secret", "SANDBOX_PROVIDER_URL=http://127.0.0.1:1"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cleanup: %v\n%s", err, out)
	}
	for _, want := range []string{`"job":"purge-expired"`, `"job":"complete-abandoned-charges"`, `"idempotency_record":{"deleted":1`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("cleanup output lacks %s:\n%s", want, out)
		}
	}
	var keys []string
	rows, err := db.Query(context.Background(), `SELECT idempotency_key FROM idempotency_record`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if strings.Join(keys, ",") != "fresh" {
		t.Errorf("records after cleanup = %v, want [fresh]", keys)
	}
}
