package config_test

import (
	"testing"
	"time"

	"github.com/example/payment-service/internal/config"
)

func TestReplayCacheDefaultsAndSettings(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := config.ReplayCache{Entries: 10_000, MaxAge: 10 * time.Minute, ClockMargin: 5 * time.Minute}
	if cfg.ReplayCache != want {
		t.Fatalf("defaults = %+v, want %+v", cfg.ReplayCache, want)
	}
	cfg, err = config.Load(env(map[string]string{"REPLAY_CACHE_ENTRIES": "0", "REPLAY_CACHE_MAX_AGE": "1h", "REPLAY_CACHE_CLOCK_MARGIN": "30s"}))
	if err != nil {
		t.Fatal(err)
	}
	want = config.ReplayCache{Entries: 0, MaxAge: time.Hour, ClockMargin: 30 * time.Second}
	if cfg.ReplayCache != want {
		t.Fatalf("set = %+v, want %+v (0 entries: off)", cfg.ReplayCache, want)
	}
}

func TestReplayCacheRejectsBadValuesNamingTheVariable(t *testing.T) {
	t.Parallel()
	wantRejected(t, []rejection{
		{"negative entries", map[string]string{"REPLAY_CACHE_ENTRIES": "-1"}, "REPLAY_CACHE_ENTRIES"},
		{"entries not a number", map[string]string{"REPLAY_CACHE_ENTRIES": "many"}, "REPLAY_CACHE_ENTRIES"},
		{"entries past the bound", map[string]string{"REPLAY_CACHE_ENTRIES": "1000001"}, "REPLAY_CACHE_ENTRIES"},
		{"max age zero", map[string]string{"REPLAY_CACHE_MAX_AGE": "0s"}, "REPLAY_CACHE_MAX_AGE"},
		{"max age past a day", map[string]string{"REPLAY_CACHE_MAX_AGE": "25h"}, "REPLAY_CACHE_MAX_AGE"},
		{"margin too small", map[string]string{"REPLAY_CACHE_CLOCK_MARGIN": "10ms"}, "REPLAY_CACHE_CLOCK_MARGIN"},
		{"margin not a duration", map[string]string{"REPLAY_CACHE_CLOCK_MARGIN": "5"}, "REPLAY_CACHE_CLOCK_MARGIN"},
	})
}
