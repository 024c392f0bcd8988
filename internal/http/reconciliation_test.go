package http_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// keepReconciliationRun writes a run and the item it found, as a run
// keeps them (internal/repository's SaveRun): one amount_differs.
func keepReconciliationRun(t *testing.T, db *pgxpool.Pool) {
	t.Helper()
	if _, err := db.Exec(context.Background(), `WITH run AS (
		INSERT INTO reconciliation_run (window_from, window_to, started_at, status, movements, payments, matched, found, opened)
		VALUES (now() - interval '1 day', now(), now(), 'succeeded', 3, 2, 1, 1, 1) RETURNING id),
	item AS (
		INSERT INTO reconciliation_item (key, class, subject, ref, payment_id, provider_id, ours, our_currency, theirs, their_currency,
		                                 detail, status, first_run_id, last_run_id, first_seen_at, last_seen_at, judged_at)
		SELECT 'amount_differs|sandbox:pi_x', 'amount_differs', 'payment', 'sandbox:pi_x', 7, 'txn_1', 40, 'RUB', 44, 'RUB',
		       'we hold 40 taken; the provider took 44', 'open', id, id, now(), now(), now() FROM run RETURNING id, first_run_id)
	INSERT INTO reconciliation_finding (run_id, item_id) SELECT first_run_id, id FROM item`); err != nil {
		t.Fatal(err)
	}
}

// The operators' page is for a browser: without a key it asks for one
// with HTTP Basic (and Bearer, as the API does), takes the key as Basic's
// password, refuses a client that is no operator, and shows the day's
// match rate, the open items by class and each item, under a policy that
// lets it load nothing but its own style.
func TestReconciliationPage(t *testing.T) {
	t.Parallel()
	s := startService(t, map[string]string{"OPERATOR_CLIENTS": "demo-client"})
	keepReconciliationRun(t, s.db)
	for _, tc := range []struct {
		name       string
		headers    map[string]string
		basic      string // the password, over HTTP Basic
		wantStatus int
	}{
		{"no key", map[string]string{"Authorization": ""}, "", http.StatusUnauthorized},
		{"a wrong key over Basic", map[string]string{"Authorization": ""}, "nope", http.StatusUnauthorized},
		{"a client that is no operator", map[string]string{"Authorization": ""}, otherKey, http.StatusForbidden},
		{"the operator's key over Basic", map[string]string{"Authorization": ""}, demoKey, http.StatusOK},
		{"the operator's key as a bearer", nil, "", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, s.url+"/reconciliation", nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.headers == nil {
				req.Header.Set("Authorization", "Bearer "+demoKey)
			}
			if tc.basic != "" {
				req.SetBasicAuth("operator", tc.basic)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			body := string(raw)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("%d, want %d: %s", resp.StatusCode, tc.wantStatus, body)
			}
			switch resp.StatusCode {
			case http.StatusUnauthorized:
				challenges := strings.Join(resp.Header.Values("WWW-Authenticate"), ", ")
				if !strings.Contains(challenges, "Basic ") || !strings.Contains(challenges, "Bearer ") {
					t.Errorf("WWW-Authenticate %q: want Basic, for a browser, and Bearer", challenges)
				}
			case http.StatusOK:
				for _, want := range []string{"Match rate", "50.00 %", "amount_differs", "sandbox:pi_x", "we hold 40 taken; the provider took 44"} {
					if !strings.Contains(body, want) {
						t.Errorf("the page does not show %q:\n%s", want, body)
					}
				}
				if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "style-src 'sha256-") {
					t.Errorf("Content-Security-Policy %q", csp)
				}
			}
		})
	}
}
