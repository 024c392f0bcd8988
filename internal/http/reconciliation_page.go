package http

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"time"

	"github.com/go-playground/validator/v10"
	"github.com/labstack/echo/v4"

	"github.com/example/payment-service/internal/app"
)

// The page operators look at (GET /reconciliation): a day's match rate,
// from the last run that compared it, and the open items, by class. Plain
// HTML rendered here, no script: its only style is the one block whose
// hash the Content-Security-Policy names.
//
// A browser cannot send a bearer key, so the page also takes the key as
// HTTP Basic's password (any user name): the browser asks for it once.

// pageStyle is the page's one style block.
const pageStyle = `body{font-family:sans-serif;margin:2em;color:#222}table{border-collapse:collapse}` +
	`td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}th{background:#f3f3f3}` +
	`.num{text-align:right}.bad{color:#a00}.good{color:#070}`

var pageCSP = "default-src 'none'; style-src 'sha256-" + hashOf(pageStyle) + "'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

func hashOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base64.StdEncoding.EncodeToString(sum[:])
}

var pageTemplate = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Reconciliation</title><style>{{.Style}}</style></head>
<body>
<h1>Reconciliation</h1>
<form method="get" action="/reconciliation"><label>Day <input type="date" name="day" value="{{.Day}}" required></label> <button>Show</button></form>
<h2>{{.Day}}</h2>
{{if .Run}}<p>Match rate <strong class="{{if eq .Run.Found 0}}good{{else}}bad{{end}}">{{.Rate}}</strong>:
{{.Run.Matched}} matched, {{.Run.Found}} mismatched, {{.Run.Expected}} still settling;
run {{.Run.ID}} over {{.Run.From.UTC.Format "2006-01-02 15:04"}} to {{.Run.To.UTC.Format "2006-01-02 15:04"}} UTC{{if not .Whole}} (part of the day){{end}}.</p>
{{else}}<p>No run compared this day yet.</p>{{end}}
<h2>Open items</h2>
<table><tr>{{range .Classes}}<th>{{.Class}}</th>{{end}}</tr><tr>{{range .Classes}}<td class="num">{{.Open}}</td>{{end}}</tr></table>
{{if .LastSuccess}}<p>Last successful run kept at {{.LastSuccess}} UTC.</p>{{else}}<p>No run has succeeded yet.</p>{{end}}
{{if .Items}}<table>
<tr><th>class</th><th>reference</th><th>payment</th><th>ours</th><th>theirs</th><th>what</th><th>since</th></tr>
{{range .Items}}<tr><td>{{.Class}}</td><td>{{.Ref}}{{if .ProviderID}}<br>{{.ProviderID}}{{end}}</td><td>{{if .PaymentID}}{{.PaymentID}}{{end}}</td>
<td class="num">{{.Ours}} {{.OurCurrency}}</td><td class="num">{{.Theirs}} {{.TheirCurrency}}</td><td>{{.Detail}}</td><td>{{.FirstSeen.UTC.Format "2006-01-02 15:04"}}</td></tr>
{{end}}</table>{{if .More}}<p>The first {{len .Items}} shown; GET /reconciliation/items reads the rest.</p>{{end}}
{{else}}<p>None: the books agree.</p>{{end}}
<p>What to do with each class: docs/reconciliation.md.</p>
</body></html>
`))

// pageItems bounds the items the page lists.
const pageItems = 200

func (h *reconciliationHandlers) page(c echo.Context) error {
	ctx := c.Request().Context()
	day := h.now().UTC().Truncate(24 * time.Hour)
	// The form's field is required, so a browser never sends it empty.
	var errs []FieldError
	if v := queryValue(c, "day", &errs); v != "" {
		d, err := time.Parse(time.DateOnly, v)
		if err != nil {
			return validationProblem([]FieldError{{Field: "day", Message: "must be a date, YYYY-MM-DD"}})
		}
		day = d
	}
	if errs != nil {
		return validationProblem(errs)
	}
	data := struct {
		Style   template.CSS
		Day     string
		Run     *app.ReconciliationRun
		Whole   bool
		Rate    string
		Classes []struct {
			Class app.MismatchClass
			Open  int
		}
		LastSuccess string
		Items       []app.ReconciliationItem
		More        bool
	}{Style: template.CSS(pageStyle), Day: day.Format(time.DateOnly)} //nolint:gosec // G203: the page's own constant style
	run, whole, err := h.reader.DayRun(ctx, day)
	switch {
	case err == nil:
		data.Run, data.Whole = &run, whole
		data.Rate = fmt.Sprintf("%.2f %%", run.MatchRate()*100)
	case !errors.Is(err, app.ErrRunNotFound):
		return err
	}
	st, err := h.reader.Stats(ctx)
	if err != nil {
		return err
	}
	for _, class := range app.MismatchClasses {
		data.Classes = append(data.Classes, struct {
			Class app.MismatchClass
			Open  int
		}{class, st.Open[class]})
	}
	if !st.LastSuccess.IsZero() {
		data.LastSuccess = st.LastSuccess.UTC().Format("2006-01-02 15:04:05")
	}
	open := true
	items, err := h.reader.Items(ctx, app.ItemFilter{Open: &open}, 0, pageItems+1)
	if err != nil {
		return err
	}
	if len(items) > pageItems {
		items, data.More = items[:pageItems], true
	}
	data.Items = items
	var b bytes.Buffer
	if err := pageTemplate.Execute(&b, data); err != nil {
		return err
	}
	h2 := c.Response().Header()
	h2.Set(echo.HeaderContentSecurityPolicy, pageCSP)
	h2.Set(echo.HeaderXFrameOptions, "DENY")
	h2.Set(echo.HeaderXContentTypeOptions, "nosniff")
	h2.Set(echo.HeaderReferrerPolicy, "no-referrer")
	h2.Set("Cache-Control", "no-store")
	return c.HTMLBlob(http.StatusOK, b.Bytes())
}

// pageAuth is auth that also takes the API key as HTTP Basic's password,
// and asks a browser for it (WWW-Authenticate: Basic) when it is missing
// or wrong.
func pageAuth(auth echo.MiddlewareFunc) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		authed := auth(next)
		return func(c echo.Context) error {
			req := c.Request()
			if _, password, ok := req.BasicAuth(); ok {
				req.Header.Set(echo.HeaderAuthorization, "Bearer "+password)
			}
			err := authed(c)
			var p *Problem
			if errors.As(err, &p) && p.Status == http.StatusUnauthorized {
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Basic realm="payment-service operators", charset="UTF-8"`)
			}
			return err
		}
	}
}

// currencyValidator checks a currency as the API's requests are checked.
var currencyValidator = validator.New()

func validCurrency(code string) bool { return currencyValidator.Var(code, "iso4217") == nil }
