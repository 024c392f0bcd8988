package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/example/payment-service/pkg/paymentclient"
)

// reconciliationSteps numbers reconciliation's steps, after the others.
const reconciliationSteps = 25

// reconcileWait bounds each wait for a reconciliation run: make dev and
// compose run one every 10 seconds.
const reconcileWait = 90 * time.Second

// reconciliation shows one fault found and resolved: a charge whose answer
// and webhook are both lost (the sandbox's drop_hooklost_ prefix), which
// nobody asks about, is found by reconciliation as missing_in_service (the
// provider took the money, the payment is PENDING); the client's retry
// with the same key records it, and the next run closes the item. The
// order must be known to the service (published by the caller).
func (d demo) reconciliation(ctx context.Context, orderID int64) error {
	key := fmt.Sprintf("demo-recon-%d", orderID)
	req := demoCharge(orderID, fmt.Sprintf("drop_hooklost_recon_%d", orderID))
	ref := "sandbox:" + req.ExternalPaymentID
	step("%d. a lost answer nobody asks about: order %d charged once through a provider that charges, then loses both its answer and its webhook; the client does not retry (yet)",
		reconciliationSteps, orderID)
	if err := d.chargeOnce(ctx, key, req); err != nil {
		return err
	}
	step("%d. reconciliation compares the provider's books with ours (make dev and compose run it every 10 seconds): the provider took 100.50, our payment is PENDING, an open item of class missing_in_service",
		reconciliationSteps+1)
	item, err := d.awaitItem(ctx, "open", ref)
	if err != nil {
		return err
	}
	fmt.Printf("item %d: %s\n", item.ID, item.Detail)
	step("%d. the client retries with the same key and body, as it must: the service asks the provider again and records the charge", reconciliationSteps+2)
	res, err := d.client.Charge(ctx, key, req)
	if err != nil {
		return err
	}
	fmt.Printf("payment %d %s\n", res.Payment.ID, res.Payment.Status)
	step("%d. the next run compares the payment again and closes its item", reconciliationSteps+3)
	closed, err := d.awaitItem(ctx, "closed", ref)
	if err != nil {
		return err
	}
	fmt.Printf("item %d closed by run %d\n", closed.ID, closed.ClosedRunID)
	step("%d. the run: GET /reconciliation/runs/%d (what it compared, matched and closed); the page an operator looks at is GET /reconciliation", reconciliationSteps+4, closed.ClosedRunID)
	_, err = d.get(ctx, fmt.Sprintf("/reconciliation/runs/%d", closed.ClosedRunID))
	return err
}

// chargeOnce sends the charge as one attempt, but for 422 order-not-found
// (nothing stored: the order is not projected yet), and expects 503
// outcome-unknown.
func (d demo) chargeOnce(ctx context.Context, key string, req paymentclient.ChargeRequest) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	for {
		r, err := http.NewRequestWithContext(ctx, http.MethodPost, d.api+"/payments", strings.NewReader(string(body)))
		if err != nil {
			return err
		}
		r.Header.Set("Authorization", "Bearer "+d.key)
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", key)
		resp, err := d.http.Do(r)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusUnprocessableEntity:
			if err := sleep(ctx, d.orderPause); err != nil {
				return err
			}
			continue
		case http.StatusServiceUnavailable:
			return nil
		}
		return fmt.Errorf("the charge answered %d, want 503 outcome-unknown", resp.StatusCode)
	}
}

// reconItem is what the demo reads of an item.
type reconItem struct {
	ID          int64  `json:"id"`
	Ref         string `json:"ref"`
	Class       string `json:"class"`
	Status      string `json:"status"`
	Detail      string `json:"detail"`
	ClosedRunID int64  `json:"closedRunId"`
}

// awaitItem polls the items of status until the one about ref shows,
// printing the last answer.
func (d demo) awaitItem(ctx context.Context, status, ref string) (reconItem, error) {
	deadline := time.Now().Add(reconcileWait)
	quiet := &http.Client{Timeout: 10 * time.Second}
	for {
		r, err := http.NewRequestWithContext(ctx, http.MethodGet, d.api+"/reconciliation/items?class=missing_in_service&status="+status, nil)
		if err != nil {
			return reconItem{}, err
		}
		r.Header.Set("Authorization", "Bearer "+d.key)
		resp, err := quiet.Do(r)
		if err != nil {
			return reconItem{}, err
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return reconItem{}, err
		}
		if resp.StatusCode != http.StatusOK {
			return reconItem{}, fmt.Errorf("GET /reconciliation/items: %d %s (is the demo's client in OPERATOR_CLIENTS?)", resp.StatusCode, b)
		}
		var page struct {
			Items []reconItem `json:"items"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return reconItem{}, err
		}
		for _, it := range page.Items {
			if it.Ref == ref {
				fmt.Printf("GET /reconciliation/items?class=missing_in_service&status=%s\n%s\n", status, b)
				return it, nil
			}
		}
		if time.Now().After(deadline) {
			return reconItem{}, fmt.Errorf("no %s item about %s after %s: does the stack run reconciliation (RECONCILE_CRON)?", status, ref, reconcileWait)
		}
		if err := sleep(ctx, time.Second); err != nil {
			return reconItem{}, err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
