package http_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/servicetest"
)

// /health needs no key, so it names the failing part and nothing of why:
// the database error's text (its user, database name, host:port) goes to
// the log, not to whoever asks.
func TestHealthNamesTheFailingPartWithoutItsInternals(t *testing.T) {
	t.Parallel()
	logs := &servicetest.LogBuffer{}
	// A port nothing listens on: connect fails at once, with an error that
	// names the user, the host:port and the database.
	dsn := "postgres://health_user@127.0.0.1:1/health_secret_db?sslmode=disable&connect_timeout=2"
	s := startServiceWith(t, dsn, nil, sandboxprovider.Config{}, func(o *startOptions) { o.logs = logs })

	r := s.request(t, http.MethodGet, "/health", "", map[string]string{"Authorization": ""})
	if r.status != http.StatusOK {
		t.Fatalf("/health: %d %s", r.status, r.body)
	}
	var report struct {
		Status     string
		Components []map[string]string
	}
	if err := json.Unmarshal(r.body, &report); err != nil {
		t.Fatal(err)
	}
	if report.Status != "degraded" || len(report.Components) == 0 ||
		report.Components[0]["name"] != "database" || report.Components[0]["status"] != "failing" {
		t.Fatalf("/health: %s; want degraded, with the database failing", r.body)
	}
	for _, internal := range []string{"health_user", "health_secret_db", "127.0.0.1", "connect", "dial"} {
		if strings.Contains(string(r.body), internal) {
			t.Errorf("/health tells anyone %q: %s", internal, r.body)
		}
	}
	if log := logs.String(); !strings.Contains(log, `"component":"database"`) || !strings.Contains(log, "127.0.0.1") {
		t.Errorf("the log has not the database's error:\n%s", log)
	}
}
