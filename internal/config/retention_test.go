package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/example/payment-service/internal/config"
)

func TestRetentionDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := config.Retention{
		IdempotencyTTL:          72 * time.Hour,
		CleanupCron:             "0 0 3 * * *",
		ProcessedEventRetention: 7 * 24 * time.Hour,
		OutboxRetention:         24 * time.Hour,
		BatchSize:               5000,
		RowsPerSecond:           10_000,
		CompleterCron:           "30 * * * * *",
		CompleterGrace:          time.Minute,
	}
	if cfg.Retention != want {
		t.Fatalf("retention defaults = %+v, want %+v", cfg.Retention, want)
	}
}

// R-DIST-IDEM-5: the idempotency TTL is 24-72 h, and the service refuses to
// start otherwise, saying which rule and which variable.
func TestIdempotencyTTLOutside24To72HoursRefusesToStart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ttl string
		ok  bool
	}{
		{"24h", true},
		{"48h", true},
		{"72h", true},
		{"23h59m", false},
		{"72h1m", false},
		{"1h", false},
		{"0s", false},
		{"-24h", false},
		{"168h", false},
	}
	for _, tc := range tests {
		t.Run(tc.ttl, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.Load(env(map[string]string{"IDEMPOTENCY_TTL": tc.ttl}))
			if tc.ok {
				want, _ := time.ParseDuration(tc.ttl)
				if err != nil || cfg.Retention.IdempotencyTTL != want {
					t.Fatalf("TTL %s: %v, %s", tc.ttl, err, cfg.Retention.IdempotencyTTL)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "IDEMPOTENCY_TTL:") || !strings.Contains(err.Error(), "R-DIST-IDEM-5") {
				t.Fatalf("TTL %s: err = %v, want one naming IDEMPOTENCY_TTL and R-DIST-IDEM-5", tc.ttl, err)
			}
		})
	}
}

func TestRetentionRejectsBadValuesNamingTheVariable(t *testing.T) {
	t.Parallel()
	wantRejected(t, []rejection{
		{"processed events shorter than the TTL", map[string]string{"PROCESSED_EVENT_RETENTION": "48h"}, "PROCESSED_EVENT_RETENTION"},
		{"processed events shorter than a shorter TTL", map[string]string{"IDEMPOTENCY_TTL": "24h", "PROCESSED_EVENT_RETENTION": "23h"}, "PROCESSED_EVENT_RETENTION"},
		{"bad cron", map[string]string{"IDEMPOTENCY_CLEANUP_CRON": "at three"}, "IDEMPOTENCY_CLEANUP_CRON"},
		{"bad completer cron", map[string]string{"CHARGE_COMPLETER_CRON": "61 * * * * *"}, "CHARGE_COMPLETER_CRON"},
		{"bad completer grace", map[string]string{"CHARGE_COMPLETER_GRACE": "2h"}, "CHARGE_COMPLETER_GRACE"},
		{"negative completer grace", map[string]string{"CHARGE_COMPLETER_GRACE": "-1s"}, "CHARGE_COMPLETER_GRACE"},
		{"bad outbox retention", map[string]string{"OUTBOX_RETENTION": "soon"}, "OUTBOX_RETENTION"},
		{"zero batch", map[string]string{"CLEANUP_BATCH_SIZE": "0"}, "CLEANUP_BATCH_SIZE"},
		{"huge batch", map[string]string{"CLEANUP_BATCH_SIZE": "1000000"}, "CLEANUP_BATCH_SIZE"},
		{"negative purge rate", map[string]string{"CLEANUP_ROWS_PER_SECOND": "-1"}, "CLEANUP_ROWS_PER_SECOND"},
		{"purge rate in words", map[string]string{"CLEANUP_ROWS_PER_SECOND": "fast"}, "CLEANUP_ROWS_PER_SECOND"},
	})
	// 0 turns the purge's pacing off.
	if cfg, err := config.Load(env(map[string]string{"CLEANUP_ROWS_PER_SECOND": "0"})); err != nil || cfg.Retention.RowsPerSecond != 0 {
		t.Fatalf("CLEANUP_ROWS_PER_SECOND=0: %v, %d", err, cfg.Retention.RowsPerSecond)
	}
	// A retention equal to the TTL is allowed.
	if _, err := config.Load(env(map[string]string{"IDEMPOTENCY_TTL": "48h", "PROCESSED_EVENT_RETENTION": "48h"})); err != nil {
		t.Fatal(err)
	}
}
