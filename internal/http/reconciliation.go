package http

import (
	"errors"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/example/payment-service/internal/app"
)

// The operators' endpoints: what reconciliation found (docs/reconciliation.md).
// Read-only: an item is closed by a later run, never by a request. They
// show every client's payments, so only OPERATOR_CLIENTS may read them.
//
//	GET /reconciliation/runs              the latest runs
//	GET /reconciliation/runs/{id}         a run
//	GET /reconciliation/runs/{id}/items   the items it found
//	GET /reconciliation/items             items, open by default, by class and currency
//	GET /reconciliation/summary           the open items by class, what they leave unmatched, the last successful run
//	GET /reconciliation                   the page: a day's match rate and the open items
type reconciliationHandlers struct {
	reader app.ReconciliationReader
	now    func() time.Time
}

// operatorsOnly lets through the clients named in operators, after
// authenticate; any other is 403.
func operatorsOnly(operators []string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if !slices.Contains(operators, string(clientID(c))) {
				return newProblem(http.StatusForbidden, codeForbidden, "Forbidden",
					"This client may not read the operators' endpoints: name it in OPERATOR_CLIENTS.")
			}
			return next(c)
		}
	}
}

func (h *reconciliationHandlers) register(e *echo.Echo, auth echo.MiddlewareFunc, operators []string) {
	only := operatorsOnly(operators)
	e.GET("/reconciliation/runs", h.listRuns, auth, only)
	e.GET("/reconciliation/runs/:id", h.getRun, auth, only)
	e.GET("/reconciliation/runs/:id/items", h.runItems, auth, only)
	e.GET("/reconciliation/items", h.listItems, auth, only)
	e.GET("/reconciliation/summary", h.summary, auth, only)
	e.GET("/reconciliation", h.page, pageAuth(auth), only)
}

// runResponse is a run as the API shows it.
type runResponse struct {
	ID         int64     `json:"id"`
	WindowFrom time.Time `json:"windowFrom"`
	WindowTo   time.Time `json:"windowTo"`
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt"`
	Status     string    `json:"status"`
	Error      string    `json:"error,omitempty"`
	Movements  int       `json:"movements"`
	Payouts    int       `json:"payouts"`
	Payments   int       `json:"payments"`
	Refunds    int       `json:"refunds"`
	Matched    int       `json:"matched"`
	Found      int       `json:"found"`
	Expected   int       `json:"expected"`
	Opened     int       `json:"opened"`
	Closed     int       `json:"closed"`
	MatchRate  float64   `json:"matchRate"`
}

func toRunResponse(r app.ReconciliationRun) runResponse {
	return runResponse{ID: r.ID, WindowFrom: r.From.UTC(), WindowTo: r.To.UTC(), StartedAt: r.Started.UTC(),
		FinishedAt: r.Finished.UTC(), Status: r.Status, Error: r.Error, Movements: r.Movements, Payouts: r.Payouts,
		Payments: r.Payments, Refunds: r.Refunds, Matched: r.Matched, Found: r.Found, Expected: r.Expected,
		Opened: r.Opened, Closed: r.Closed, MatchRate: r.MatchRate()}
}

// itemResponse is an item as the API shows it.
type itemResponse struct {
	ID            int64      `json:"id"`
	Key           string     `json:"key"`
	Class         string     `json:"class"`
	Subject       string     `json:"subject"`
	Ref           string     `json:"ref,omitempty"`
	PaymentID     int64      `json:"paymentId,omitempty"`
	RefundID      int64      `json:"refundId,omitempty"`
	ProviderID    string     `json:"providerId,omitempty"`
	Ours          string     `json:"ours"`
	OurCurrency   string     `json:"ourCurrency,omitempty"`
	Theirs        string     `json:"theirs"`
	TheirCurrency string     `json:"theirCurrency,omitempty"`
	Detail        string     `json:"detail"`
	Status        string     `json:"status"`
	FirstRunID    int64      `json:"firstRunId"`
	LastRunID     int64      `json:"lastRunId"`
	ClosedRunID   int64      `json:"closedRunId,omitempty"`
	FirstSeenAt   time.Time  `json:"firstSeenAt"`
	LastSeenAt    time.Time  `json:"lastSeenAt"`
	ClosedAt      *time.Time `json:"closedAt,omitempty"`
}

func toItemResponse(it app.ReconciliationItem) itemResponse {
	r := itemResponse{ID: it.ID, Key: it.Key, Class: string(it.Class), Subject: string(it.Subject), Ref: it.Ref,
		PaymentID: int64(it.PaymentID), RefundID: int64(it.RefundID), ProviderID: it.ProviderID,
		Ours: it.Ours.String(), OurCurrency: it.OurCurrency, Theirs: it.Theirs.String(), TheirCurrency: it.TheirCurrency,
		Detail: it.Detail, Status: "open", FirstRunID: it.FirstRun, LastRunID: it.LastRun, ClosedRunID: it.ClosedRun,
		FirstSeenAt: it.FirstSeen.UTC(), LastSeenAt: it.LastSeen.UTC()}
	if !it.Open {
		r.Status = "closed"
		closed := it.Closed.UTC()
		r.ClosedAt = &closed
	}
	return r
}

type runsResponse struct {
	Runs []runResponse `json:"runs"`
}

type itemsResponse struct {
	Items []itemResponse `json:"items"`
	// NextAfter, when set, is the after that reads the next page.
	NextAfter int64 `json:"nextAfter,omitempty"`
}

const (
	defaultPageSize = 100
	maxPageSize     = 1000
)

// queryValue is the query parameter name, "" when it is not named. Named
// with no value it is an error: no parameter of the API has an empty
// value, and a filter left empty would select what the caller did not ask
// for.
func queryValue(c echo.Context, name string, errs *[]FieldError) string {
	v, named := c.QueryParams()[name]
	if !named {
		return ""
	}
	if v[0] == "" {
		*errs = append(*errs, FieldError{Field: name, Message: "must not be empty"})
	}
	return v[0]
}

// queryInt reads an optional positive integer query parameter (0 when
// absent), at most most.
func queryInt(c echo.Context, name string, most int64, errs *[]FieldError) int64 {
	v := queryValue(c, name, errs)
	if v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 || n > most {
		*errs = append(*errs, FieldError{Field: name, Message: "must be an integer from 1 to " + strconv.FormatInt(most, 10)})
		return 0
	}
	return n
}

func pageSize(c echo.Context, errs *[]FieldError) int {
	if n := queryInt(c, "limit", maxPageSize, errs); n > 0 {
		return int(n)
	}
	return defaultPageSize
}

func (h *reconciliationHandlers) listRuns(c echo.Context) error {
	var errs []FieldError
	before := queryInt(c, "before", math.MaxInt64, &errs)
	limit := pageSize(c, &errs)
	if errs != nil {
		return validationProblem(errs)
	}
	runs, err := h.reader.Runs(c.Request().Context(), before, limit)
	if err != nil {
		return err
	}
	out := runsResponse{Runs: []runResponse{}}
	for _, r := range runs {
		out.Runs = append(out.Runs, toRunResponse(r))
	}
	return c.JSON(http.StatusOK, out)
}

// runID reads the path's run id.
func runID(c echo.Context) (int64, error) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id < 1 {
		return 0, validationProblem([]FieldError{{Field: "id", Message: "must be a positive integer"}})
	}
	return id, nil
}

func runNotFound(err error) error {
	if errors.Is(err, app.ErrRunNotFound) {
		return newProblem(http.StatusNotFound, codeRunNotFound, "Reconciliation run not found", "")
	}
	return err
}

func (h *reconciliationHandlers) getRun(c echo.Context) error {
	id, err := runID(c)
	if err != nil {
		return err
	}
	run, err := h.reader.Run(c.Request().Context(), id)
	if err != nil {
		return runNotFound(err)
	}
	return c.JSON(http.StatusOK, toRunResponse(run))
}

func (h *reconciliationHandlers) runItems(c echo.Context) error {
	id, err := runID(c)
	if err != nil {
		return err
	}
	if _, err := h.reader.Run(c.Request().Context(), id); err != nil {
		return runNotFound(err)
	}
	return h.items(c, app.ItemFilter{Run: id})
}

func (h *reconciliationHandlers) listItems(c echo.Context) error {
	var errs []FieldError
	f := app.ItemFilter{Class: app.MismatchClass(queryValue(c, "class", &errs)), Currency: queryValue(c, "currency", &errs)}
	switch queryValue(c, "status", &errs) {
	case "", "open": // not named: the open ones (named empty is refused)
		open := true
		f.Open = &open
	case "closed":
		closed := false
		f.Open = &closed
	case "all":
	default:
		errs = append(errs, FieldError{Field: "status", Message: "must be open, closed or all"})
	}
	if f.Class != "" && !slices.Contains(app.MismatchClasses, f.Class) {
		errs = append(errs, FieldError{Field: "class", Message: "must be a mismatch class (docs/reconciliation.md)"})
	}
	if f.Currency != "" && !validCurrency(f.Currency) {
		errs = append(errs, FieldError{Field: "currency", Message: "must be an ISO 4217 currency code"})
	}
	if errs != nil {
		return validationProblem(errs)
	}
	return h.items(c, f)
}

// items answers a page of the items f selects.
func (h *reconciliationHandlers) items(c echo.Context, f app.ItemFilter) error {
	var errs []FieldError
	after := queryInt(c, "after", math.MaxInt64, &errs)
	limit := pageSize(c, &errs)
	if errs != nil {
		return validationProblem(errs)
	}
	items, err := h.reader.Items(c.Request().Context(), f, after, limit+1)
	if err != nil {
		return err
	}
	out := itemsResponse{Items: []itemResponse{}}
	for i, it := range items {
		if i == limit {
			out.NextAfter = items[limit-1].ID
			break
		}
		out.Items = append(out.Items, toItemResponse(it))
	}
	return c.JSON(http.StatusOK, out)
}

type summaryResponse struct {
	// Open counts the open items by class, every class.
	Open map[string]int `json:"open"`
	// Unmatched is what they leave unexplained, by currency.
	Unmatched map[string]string `json:"unmatched"`
	// LastSuccessAt is when the last successful run was kept.
	LastSuccessAt *time.Time `json:"lastSuccessAt,omitempty"`
}

func (h *reconciliationHandlers) summary(c echo.Context) error {
	st, err := h.reader.Stats(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toSummary(st))
}

func toSummary(st app.ReconciliationStats) summaryResponse {
	out := summaryResponse{Open: map[string]int{}, Unmatched: map[string]string{}}
	for class, n := range st.Open {
		out.Open[string(class)] = n
	}
	for currency, amount := range st.Unmatched {
		out.Unmatched[currency] = amount.String()
	}
	if !st.LastSuccess.IsZero() {
		last := st.LastSuccess.UTC()
		out.LastSuccessAt = &last
	}
	return out
}
