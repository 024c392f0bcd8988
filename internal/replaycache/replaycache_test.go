package replaycache_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/replaycache"
)

var t0 = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

func rec(client domain.ClientID, key string) app.IdempotencyRecord {
	return app.IdempotencyRecord{Scope: app.IdempotencyScope{ClientID: client, Key: key},
		CommandHash: "h", Status: app.RecordCompleted, Response: app.StoredResponse{StatusCode: 201, Body: []byte(`"` + string(client) + key + `"`)}}
}

// Keys are scoped as phase 0 reads them: the same key of two clients, or
// a saga step's key beside an HTTP key, are different entries.
func TestEntriesAreScopedByClientAndKey(t *testing.T) {
	t.Parallel()
	c := replaycache.New(10, prometheus.NewRegistry())
	until := t0.Add(time.Hour)
	c.Put(rec("a", "k"), until)
	c.Put(rec("b", "k"), until)
	c.Put(rec("a", app.SagaKeyPrefix+"k"), until)
	for _, r := range []app.IdempotencyRecord{rec("a", "k"), rec("b", "k"), rec("a", app.SagaKeyPrefix+"k")} {
		got, ok := c.Get(r.Scope, t0)
		if !ok || string(got.Response.Body) != string(r.Response.Body) {
			t.Fatalf("Get(%v) = %s, %v; want %s", r.Scope, got.Response.Body, ok, r.Response.Body)
		}
	}
	if _, ok := c.Get(app.IdempotencyScope{ClientID: "c", Key: "k"}, t0); ok {
		t.Fatal("a client that never sent the key got an entry")
	}
}

// Full, the least recently used entry makes room; an entry met at or
// after its end is dropped; each is counted.
func TestEvictsTheLeastRecentlyUsedAndTheEnded(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	c := replaycache.New(2, reg)
	c.Put(rec("a", "1"), t0.Add(time.Hour))
	c.Put(rec("a", "2"), t0.Add(time.Minute))
	if _, ok := c.Get(rec("a", "1").Scope, t0); !ok { // 1 is now the most recent
		t.Fatal("entry 1 missing")
	}
	c.Put(rec("a", "3"), t0.Add(time.Hour)) // 2 makes room
	if _, ok := c.Get(rec("a", "2").Scope, t0); ok {
		t.Fatal("entry 2 survived; the least recently used should have made room")
	}
	if _, ok := c.Get(rec("a", "3").Scope, t0.Add(time.Hour)); ok {
		t.Fatal("entry 3 answered at its end")
	}
	if c.Len() != 1 {
		t.Fatalf("Len = %d, want 1 (entry 1)", c.Len())
	}
	for name, want := range map[string]float64{
		"payment_idempotency_replay_cache_hits_total":   1,
		"payment_idempotency_replay_cache_misses_total": 2,
		"payment_idempotency_replay_cache_entries":      1,
	} {
		if got := gathered(t, reg, name, ""); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	for reason, want := range map[string]float64{"capacity": 1, "expired": 1} {
		if got := gathered(t, reg, "payment_idempotency_replay_cache_evictions_total", reason); got != want {
			t.Errorf("evictions{reason=%q} = %v, want %v", reason, got, want)
		}
	}
}

// gathered is the value of name's sample (with reason, when given).
func gathered(t *testing.T, reg *prometheus.Registry, name, reason string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if reason != "" && (len(m.GetLabel()) != 1 || m.GetLabel()[0].GetValue() != reason) {
				continue
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no sample of %s %s", name, reason)
	return 0
}
