package config_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/example/payment-service/internal/config"
)

func TestWebhookConfig(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(env(nil))
	if err != nil || len(cfg.Webhooks.Secrets) != 0 || cfg.Webhooks.Tolerance != 5*time.Minute {
		t.Fatalf("defaults: %+v, %v; want no secret (the endpoint answers 503) and 5m", cfg.Webhooks, err)
	}
	cfg, err = config.Load(env(map[string]string{"WEBHOOK_SECRETS": " whsec_new_0123456789 , whsec_old_0123456789", "WEBHOOK_TOLERANCE": "2m"})) //nolint:gosec // G101: the test's own secrets
	if err != nil || len(cfg.Webhooks.Secrets) != 2 || string(cfg.Webhooks.Secrets[0].Bytes()) != "whsec_new_0123456789" ||
		string(cfg.Webhooks.Secrets[1].Bytes()) != "whsec_old_0123456789" || cfg.Webhooks.Tolerance != 2*time.Minute {
		t.Fatalf("two secrets: %+v, %v", cfg.Webhooks, err)
	}
	wantRejected(t, []rejection{
		{"three secrets", map[string]string{"WEBHOOK_SECRETS": "whsec_a_0123456789,whsec_b_0123456789,whsec_c_0123456789"}, "WEBHOOK_SECRETS"},
		{"a short secret", map[string]string{"WEBHOOK_SECRETS": "short"}, "WEBHOOK_SECRETS"},
		{"tolerance too long", map[string]string{"WEBHOOK_TOLERANCE": "2h"}, "WEBHOOK_TOLERANCE"},
	})
}

// A webhook secret never leaves the process by accident: not in a start
// error, not when the configuration is printed, logged or marshalled.
func TestWebhookSecretsAreNeverEchoed(t *testing.T) {
	t.Parallel()
	const secret = "whsec_do_not_print_me_42" //nolint:gosec // G101: the test's own secret
	for _, bad := range []string{secret + ",whsec_b_0123456789,whsec_c_0123456789", "tiny_s3cr"} {
		_, err := config.Load(env(map[string]string{"WEBHOOK_SECRETS": bad}))
		if err == nil || strings.Contains(err.Error(), "whsec") || strings.Contains(err.Error(), "tiny_s3cr") {
			t.Fatalf("err = %v: must fail without echoing a secret", err)
		}
	}
	cfg, err := config.Load(env(map[string]string{"WEBHOOK_SECRETS": secret}))
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "webhooks", cfg.Webhooks, "secret", cfg.Webhooks.Secrets[0])
	marshalled, err := json.Marshal(cfg.Webhooks)
	if err != nil {
		t.Fatal(err)
	}
	for how, text := range map[string]string{
		"%v": fmt.Sprintf("%v", cfg), "%+v": fmt.Sprintf("%+v", cfg), "%#v": fmt.Sprintf("%#v", cfg),
		"%s and %q of the secret": fmt.Sprintf("%s %q", cfg.Webhooks.Secrets[0], cfg.Webhooks.Secrets[0]), "slog": logged.String(), "JSON": string(marshalled),
	} {
		if strings.Contains(text, secret) || strings.Contains(text, fmt.Sprint([]byte(secret))) {
			t.Errorf("%s shows the secret: %s", how, text)
		}
	}
}
