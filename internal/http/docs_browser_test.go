package http_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromium finds the browser: CHROMIUM, else chromium on PATH (Debian's
// package, which .ci/run installs when it is missing). Missing is a failure,
// not a skip: a test that cannot run has not passed.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found: install Debian's package (apt-get install chromium; .ci/run does) or set CHROMIUM to the browser's path")
	return ""
}

// The /docs page in a real browser (headless Chromium): it loads with no
// console error (a Content-Security-Policy violation is one), lists POST
// /payments, keeps the key typed under Authorize out of the browser's
// storage, and "Try it out" with that key charges an order through the
// running service (201, and the payment is in the database). A screenshot goes to the test's temp dir;
// with DOCS_SCREENSHOT set, also to that path (make docs-screenshot writes
// docs/api-docs.png, docs/api.md's picture, this way).
//
// Every wait is bounded by the test's two-minute context.
func TestDocsPageInABrowserChargesAnOrder(t *testing.T) {
	t.Parallel()
	browser := chromium(t)
	s := startService(t, nil)
	s.addOrder(t, 1001, 42, "100.50", "RUB")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ctx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(browser),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
		// Root in CI: no sandbox. No GPU, no QUIC, and none of the
		// background traffic to Google's services a fresh profile starts.
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	defer cancelAlloc()
	ctx, cancelTab := chromedp.NewContext(ctx)
	defer cancelTab()

	// Every console message of the page, errors included, collected until
	// the tab closes.
	var mu sync.Mutex
	var console []chromedp.ConsoleMessage
	messages := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			mu.Lock()
			console = append(console, m)
			mu.Unlock()
		}
	}()

	const op = `#operations-default-chargePayment`
	body := chargeBody(1001, 42, "100.50", "RUB", "pi_docs_1")
	err := chromedp.Do(ctx,
		chromedp.Navigate(s.url+"/docs"),
		chromedp.WaitVisible(op),
		// Authorize with the demo key.
		chromedp.Click(`.auth-wrapper button.authorize`),
		chromedp.WaitVisible(`.modal-ux input`),
		chromedp.SendKeys(`.modal-ux input`, demoKey),
		chromedp.Click(`.modal-ux button.authorize`),
		chromedp.Click(`.modal-ux button.btn-done`),
		// The key is in the page's memory only: nothing of it in the
		// browser's storage, where any script of this origin, and the next
		// user of the machine, would find it.
		func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			stored, err := chromedp.Evaluate[string](`JSON.stringify([Object.entries(localStorage), Object.entries(sessionStorage), document.cookie])`)(ctx, tg)
			if err == nil && strings.Contains(stored, demoKey) {
				t.Errorf("the key typed under Authorize is kept in the browser: %s", stored)
			}
			return chromedp.Void{}, err
		},
		// Open POST /payments and fill the form.
		chromedp.Click(op+` .opblock-summary-control`),
		chromedp.Click(op+` .try-out__btn`),
		chromedp.SendKeys(op+` tr[data-param-name="Idempotency-Key"] input`, "docs-page-1"),
		// The body editor is a React textarea that holds the example:
		// replace its text the way React notices (its value setter, then
		// an input event), as select-all and typing would.
		chromedp.WaitVisible(op+` textarea.body-param__text`),
		func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			_, err := chromedp.Evaluate[any](`(() => {
				const ta = document.querySelector('`+op+` textarea.body-param__text');
				Object.getOwnPropertyDescriptor(HTMLTextAreaElement.prototype, 'value').set.call(ta, `+strconv.Quote(body)+`);
				ta.dispatchEvent(new Event('input', {bubbles: true}));
			})()`)(ctx, tg)
			return chromedp.Void{}, err
		},
		chromedp.Click(op+` button.execute`),
		chromedp.WaitVisible(op+` .live-responses-table tr.response .response-col_status`),
	)
	if err != nil {
		t.Fatalf("driving the page: %v", err)
	}
	summary, err := chromedp.Run(ctx, chromedp.Text(op+` .opblock-summary`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(summary, "POST") || !strings.Contains(summary, "/payments") {
		t.Errorf("operation summary %q, want POST /payments", summary)
	}
	status, err := chromedp.Run(ctx, chromedp.Text(op+` .live-responses-table tr.response .response-col_status`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(status) != "201" {
		response, _ := chromedp.Run(ctx, chromedp.Text(op+` .live-responses-table`))
		t.Fatalf("the page's request got %q, want 201:\n%s", status, response)
	}
	if n := s.count(t, `SELECT count(*) FROM payment WHERE external_payment_id = 'pi_docs_1' AND status = 'SUCCEEDED'`); n != 1 {
		t.Fatalf("%d payments for the page's request, want 1", n)
	}

	// The picture: the operation with its 201 in view.
	png, err := chromedp.Run(ctx, func(ctx context.Context, tg *chromedp.Target) ([]byte, error) {
		if err := chromedp.Do(ctx, chromedp.ScrollIntoView(op+` .responses-wrapper`)); err != nil {
			return nil, err
		}
		return chromedp.CaptureScreenshot()(ctx, tg)
	})
	if err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(t.TempDir(), "docs.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", shot)
	if out := os.Getenv("DOCS_SCREENSHOT"); out != "" {
		if err := os.WriteFile(out, png, 0o644); err != nil { //nolint:gosec // G703: the developer's own path (make docs-screenshot)
			t.Fatal(err)
		}
	}

	cancelTab()
	<-done
	mu.Lock()
	defer mu.Unlock()
	for _, m := range console {
		if m.Type == chromedp.ConsoleError || m.IsException() {
			t.Errorf("console: %s (%s:%d)", m, m.URL, m.Line)
		}
	}
}
