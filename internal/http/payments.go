package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-playground/validator/v10"
	"github.com/labstack/echo/v4"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/strictjson"
)

// maxBodyBytes caps a request body; larger is 413.
const maxBodyBytes = 64 << 10

// chargeOperation is the endpoint's name in the command hash.
const chargeOperation = "POST /payments"

// chargeRequest is the JSON body of POST /payments. Pointers tell a
// missing field from a zero one, so "required" can name it.
type chargeRequest struct {
	OrderID           *int64  `json:"orderId" validate:"required,gt=0"`
	CustomerID        *int64  `json:"customerId" validate:"required,gt=0"`
	Amount            *string `json:"amount" validate:"required,amount"`
	Currency          *string `json:"currency" validate:"required,iso4217"`
	PaymentProvider   *string `json:"paymentProvider" validate:"required,provider"`
	ExternalPaymentID *string `json:"externalPaymentId" validate:"required,min=1,max=128,printascii"`
}

// paymentResponse is a payment as the API shows it.
type paymentResponse struct {
	ID                int64     `json:"id"`
	OrderID           int64     `json:"orderId"`
	CustomerID        int64     `json:"customerId"`
	Amount            string    `json:"amount"`
	Currency          string    `json:"currency"`
	PaymentProvider   string    `json:"paymentProvider"`
	ExternalPaymentID string    `json:"externalPaymentId"`
	Status            string    `json:"status"`
	CreatedAt         time.Time `json:"createdAt"`
}

func toPaymentResponse(p domain.Payment) *paymentResponse {
	return &paymentResponse{
		ID:                int64(p.ID),
		OrderID:           int64(p.Charge.OrderID),
		CustomerID:        int64(p.Charge.CustomerID),
		Amount:            p.Charge.Amount.AmountString(),
		Currency:          string(p.Charge.Amount.Currency()),
		PaymentProvider:   string(p.Charge.Provider),
		ExternalPaymentID: string(p.Charge.ExternalPaymentID),
		Status:            string(p.Status),
		CreatedAt:         p.CreatedAt.UTC(),
	}
}

// paymentHandlers serves /payments.
type paymentHandlers struct {
	charge   *app.ChargePayment
	get      *app.GetPayment
	validate *validator.Validate
	metrics  *metrics
}

// chargePayment handles POST /payments. Everything that can be wrong with
// the request is checked before the use case runs, so a bad request stores
// nothing and the client can fix it and retry with the same key.
func (h *paymentHandlers) chargePayment(c echo.Context) error {
	req := c.Request()
	key, err := commandHeaders(req)
	if err != nil {
		return err
	}
	charge, err := h.decodeCharge(c)
	if err != nil {
		return err
	}

	result, err := h.charge.Handle(req.Context(), app.ChargeCommand{
		Scope:     app.IdempotencyScope{ClientID: clientID(c), Key: key},
		Charge:    charge,
		Operation: chargeOperation,
	})
	return h.respond(c, result, err)
}

// respond answers a money-moving command: the stored response as it is (a
// replay says so in Idempotent-Replayed), or the error's problem; the
// idempotency metrics count what happened.
func (h *paymentHandlers) respond(c echo.Context, result app.CommandResult, err error) error {
	var inProgress *app.InProgressError
	var unknown *app.OutcomeUnknownError
	switch {
	case errors.Is(err, app.ErrKeyReused):
		h.metrics.keyReused.Inc()
	case errors.As(err, &inProgress):
		h.metrics.inProgress.Inc()
	case errors.As(err, &unknown):
		h.metrics.unknown.Inc()
	case err == nil && result.Replayed:
		h.metrics.replays.Inc()
		c.Response().Header().Set("Idempotent-Replayed", "true")
	}
	if err != nil {
		return err
	}
	contentType := echo.MIMEApplicationJSON
	if result.Response.StatusCode >= 400 {
		contentType = contentTypeProblem
		linkProblemDocs(c.Response().Header(), storedProblemCode(result.Response.Body))
	}
	return c.Blob(result.Response.StatusCode, contentType, result.Response.Body)
}

// commandHeaders checks a command's request headers: a JSON body, and the
// Idempotency-Key, which it returns.
func commandHeaders(req *http.Request) (string, error) {
	if err := jsonContent(req); err != nil {
		return "", err
	}
	return idempotencyKey(req.Header)
}

// jsonContent checks that the request's body is declared application/json.
func jsonContent(req *http.Request) error {
	if mediaType, _, err := mime.ParseMediaType(req.Header.Get(echo.HeaderContentType)); err != nil || mediaType != echo.MIMEApplicationJSON {
		return newProblem(http.StatusUnsupportedMediaType, codeUnsupportedMediaType, "Unsupported media type",
			"Send the body as application/json.")
	}
	return nil
}

// storedProblemCode reads the code of a stored problem (ResponseEncoder
// wrote it), for its Link; an unreadable body links to the page's top.
func storedProblemCode(body []byte) string {
	var p struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(body, &p) != nil {
		return ""
	}
	return p.Code
}

// getPayment handles GET /payments/:id.
func (h *paymentHandlers) getPayment(c echo.Context) error {
	id, err := positiveIDParam(c, "id")
	if err != nil {
		return err
	}
	p, err := h.get.Handle(c.Request().Context(), clientID(c), domain.PaymentID(id))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toPaymentResponse(p))
}

// positiveIDParam reads a path parameter that must be a positive int64, or
// returns the validation problem naming it.
func positiveIDParam(c echo.Context, name string) (int64, error) {
	id, err := strconv.ParseInt(c.Param(name), 10, 64)
	if err != nil || id <= 0 {
		return 0, validationProblem([]FieldError{{Field: name, Message: "must be a positive integer"}})
	}
	return id, nil
}

// decodeCharge reads, decodes and validates the body into a domain charge.
func (h *paymentHandlers) decodeCharge(c echo.Context) (domain.Charge, error) {
	body, err := readBody(c)
	if err != nil {
		return domain.Charge{}, err
	}

	req, ok := decodeWellFormedCharge(body)
	if !ok {
		req, err = decodeReportingEverything[chargeRequest](h, body)
		if err != nil {
			return domain.Charge{}, err
		}
		return chargeOf(req)
	}
	if errs := h.validateFields(&req, nil); len(errs) > 0 {
		return domain.Charge{}, validationProblem(errs)
	}
	return chargeOf(req)
}

// readBody reads a request body of at most maxBodyBytes.
func readBody(c echo.Context) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, maxBodyBytes))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, payloadTooLarge()
	}
	if err != nil {
		return nil, newProblem(http.StatusBadRequest, codeMalformedJSON, "Malformed JSON", "The body could not be read.")
	}
	return body, nil
}

// decodeWellFormedCharge reads a body that is what a client should send:
// one object whose member names are the request's fields, each at most
// once, spelled exactly, with values json.Unmarshal takes for their types.
// Anything else (a repeated, unknown or escaped name, a wrong type, bad
// syntax, trailing data) makes it give up, and the thorough decoder names
// every problem. Unknown names and nested values end here, so a name can
// only repeat at the top level, and that is the one level it checks.
func decodeWellFormedCharge(body []byte) (chargeRequest, bool) {
	var req chargeRequest
	if !namesKnownAndOnce(body) {
		return req, false
	}
	// Unmarshal matches names without regard to case; namesKnownAndOnce
	// has already checked them exactly. It refuses trailing data.
	if err := json.Unmarshal(body, &req); err != nil {
		return req, false
	}
	return req, true
}

// chargeFields are the member names of a charge body, exactly as sent.
var chargeFields = [...]string{"orderId", "customerId", "amount", "currency", "paymentProvider", "externalPaymentId"}

// namesKnownAndOnce scans body's top-level object for its member names and
// reports whether each is one of chargeFields, spelled exactly and without
// escapes, and none repeats. It trusts json.Unmarshal to check the syntax:
// on malformed input its answer does not matter, since Unmarshal fails.
func namesKnownAndOnce(body []byte) bool {
	var seen [len(chargeFields)]bool
	depth, inString, inName, expectName := 0, false, false, false
	start := 0
	for i := 0; i < len(body); i++ {
		c := body[i]
		if inString {
			switch c {
			case '\\':
				if inName {
					return false // an escaped name: the thorough decoder compares it unescaped
				}
				i++ // the escaped byte cannot end the string
			case '"':
				inString = false
				if inName {
					k := fieldIndex(body[start:i])
					if k < 0 || seen[k] {
						return false
					}
					seen[k] = true
				}
			}
			continue
		}
		switch c {
		case '"':
			inString, inName, start = true, depth == 1 && expectName, i+1
			expectName = false
		case '{':
			depth++
			expectName = depth == 1
		case '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			expectName = depth == 1
		}
	}
	return true
}

func fieldIndex(name []byte) int {
	for k, f := range chargeFields {
		if string(name) == f {
			return k
		}
	}
	return -1
}

// decodeReportingEverything is the thorough decoder of a request body into
// the request struct R (the charge's, for a body that
// decodeWellFormedCharge did not take; the refund's, for every body): it names every repeated name, every
// unknown field and every field of the wrong JSON type, together with the
// validator's findings, in one problem.
func decodeReportingEverything[R any](h *paymentHandlers, body []byte) (R, error) {
	// A repeated name is ambiguous: encoding/json keeps the last value, a
	// gateway or audit log in front of us may keep the first, and the two
	// would disagree on what was charged. Refused before anything else
	// reads the body.
	if dups := strictjson.DuplicateKeys(body); len(dups) > 0 {
		errs := make([]FieldError, len(dups))
		for i, path := range dups {
			errs[i] = FieldError{Field: path, Message: "appears more than once; send each field once"}
		}
		return *new(R), validationProblem(errs)
	}

	var req R
	var typeErrs []FieldError
	if err := decodeStrict(body, &req); err != nil {
		var fde *fieldDecodeErrors
		if !errors.As(err, &fde) {
			return *new(R), err
		}
		typeErrs = fde.errs
	}
	if errs := h.validateFields(&req, typeErrs); len(errs) > 0 {
		return *new(R), validationProblem(errs)
	}
	return req, nil
}

// chargeOf builds the domain charge from a validated request.
func chargeOf(req chargeRequest) (domain.Charge, error) {
	// The validator has checked every field, so these constructors cannot
	// fail; their errors are still returned, never ignored.
	amount, err := decimal.NewFromString(*req.Amount)
	if err != nil {
		return domain.Charge{}, validationProblem([]FieldError{{Field: "amount", Message: err.Error()}})
	}
	money, err := domain.NewMoney(amount, domain.Currency(*req.Currency))
	if err != nil {
		return domain.Charge{}, validationProblem([]FieldError{{Field: "amount", Message: err.Error()}})
	}
	charge, err := domain.NewCharge(domain.OrderID(*req.OrderID), domain.CustomerID(*req.CustomerID), money,
		domain.ProviderName(*req.PaymentProvider), domain.ExternalPaymentID(*req.ExternalPaymentID))
	if err != nil {
		return domain.Charge{}, validationProblem([]FieldError{{Field: "body", Message: err.Error()}})
	}
	return charge, nil
}

// decodeStrict decodes one JSON object into the struct v points to,
// field by field, so that every field of the wrong JSON type and every
// unknown field is reported, not only the first. Syntax errors and trailing
// data are malformed JSON.
func decodeStrict(body []byte, v any) error {
	malformed := func(err error) error {
		return newProblem(http.StatusBadRequest, codeMalformedJSON, "Malformed JSON",
			"The body is not a valid JSON object: "+err.Error())
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var fields map[string]json.RawMessage
	if err := dec.Decode(&fields); err != nil {
		return malformed(err)
	}
	if dec.More() {
		return malformed(errors.New("trailing data after the JSON object"))
	}
	if fields == nil {
		return malformed(errors.New("the body must be a JSON object"))
	}

	target := reflect.ValueOf(v).Elem()
	byName := map[string]reflect.Value{}
	for i := 0; i < target.NumField(); i++ {
		name, _, _ := strings.Cut(target.Type().Field(i).Tag.Get("json"), ",")
		byName[name] = target.Field(i)
	}
	var errs []FieldError
	for _, name := range sortedKeys(fields) {
		field, ok := byName[name]
		if !ok {
			errs = append(errs, FieldError{Field: name, Message: "unknown field"})
			continue
		}
		if err := json.Unmarshal(fields[name], field.Addr().Interface()); err != nil {
			errs = append(errs, FieldError{Field: name, Message: "must be " + jsonTypeName(field.Type().Elem())})
			field.SetZero() // a partly decoded value must not be used
		}
	}
	if len(errs) > 0 {
		return &fieldDecodeErrors{errs: errs}
	}
	return nil
}

// fieldDecodeErrors carries per-field type errors to be merged with the
// validator's findings into one problem.
type fieldDecodeErrors struct{ errs []FieldError }

func (e *fieldDecodeErrors) Error() string { return "invalid fields" }

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func jsonTypeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int64:
		return "an integer"
	default:
		return "of type " + t.String()
	}
}

// validateFields runs the validator and returns every field error, after
// the decode errors already found (a field with a decode error is not
// reported twice).
func (h *paymentHandlers) validateFields(req any, decodeErrs []FieldError) []FieldError {
	errs := decodeErrs
	reported := map[string]bool{}
	for _, e := range decodeErrs {
		reported[e.Field] = true
	}
	var verrs validator.ValidationErrors
	if err := h.validate.Struct(req); errors.As(err, &verrs) {
		for _, fe := range verrs {
			if !reported[fe.Field()] {
				errs = append(errs, FieldError{Field: fe.Field(), Message: fieldMessage(fe)})
			}
		}
	}
	return errs
}

func fieldMessage(fe validator.FieldError) string {
	switch fe.Tag() {
	case "required":
		return "is required"
	case "gt":
		return "must be greater than " + fe.Param()
	case "min", "max":
		return fmt.Sprintf("must be 1 to %d characters", domain.MaxExternalPaymentIDLength)
	case "printascii":
		return "must be printable ASCII"
	case "iso4217":
		return "must be an ISO 4217 currency code"
	case "amount":
		return fmt.Sprintf("must be a decimal string greater than 0 with at most %d integer and %d fraction digits",
			domain.MaxIntegerDigits, domain.MaxFractionDigits)
	case "provider":
		return "unknown payment provider"
	default:
		return "is invalid (" + fe.Tag() + ")"
	}
}

// newValidator builds the request validator: JSON field names in errors, a
// decimal amount rule, and the set of known providers.
func newValidator(providers []domain.ProviderName) *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		return name
	})
	known := map[string]bool{}
	for _, p := range providers {
		known[string(p)] = true
	}
	must(v.RegisterValidation("provider", func(fl validator.FieldLevel) bool {
		return known[fl.Field().String()]
	}))
	must(v.RegisterValidation("amount", func(fl validator.FieldLevel) bool {
		return validAmount(fl.Field().String())
	}))
	return v
}

// validAmount accepts a plain decimal string ("100.50") as the spec's
// pattern ^[0-9]{1,15}(\.[0-9]{1,4})?$ writes it (no exponent, no sign, no
// spaces) and a value that domain.NewMoney accepts.
//
// The shape is checked on the text first, so no decimal arithmetic ever
// runs on more than 20 characters: the digit checks of a decimal cost time
// in the square of its length, and a 10,001-character "0.000...1" cost
// about 124 ms of CPU per request when it was parsed first
// (BenchmarkValidAmountWorstCase).
func validAmount(s string) bool {
	intPart, frac, hasPoint := strings.Cut(s, ".")
	if !digitsBetween(intPart, 1, domain.MaxIntegerDigits) ||
		hasPoint && !digitsBetween(frac, 1, domain.MaxFractionDigits) {
		return false
	}
	d, err := decimal.NewFromString(s)
	if err != nil {
		return false
	}
	_, err = domain.NewMoney(d, "XXX")
	return err == nil
}

// digitsBetween reports whether s is lo to hi ASCII digits.
func digitsBetween(s string, lo, hi int) bool {
	if len(s) < lo || len(s) > hi {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// ResponseEncoder renders the commands' outcomes into the exact responses
// that are stored with the idempotency key and replayed byte for byte
// (app.ChargeResponses, app.RefundResponses). Bodies hold nothing
// request-specific (no request id, no time of the reply), so the stored
// bytes are right for every replay.
type ResponseEncoder struct{}

// EncodeChargeOutcome renders a charge's outcome.
func (ResponseEncoder) EncodeChargeOutcome(o app.ChargeOutcome) (app.StoredResponse, error) {
	var status int
	var body any
	switch o.Kind {
	case app.ChargeSucceeded:
		status, body = http.StatusCreated, toPaymentResponse(o.Payment)
	case app.ChargeAlreadyRecorded:
		status, body = http.StatusOK, toPaymentResponse(o.Payment)
	case app.ChargeDeclined:
		p := newProblem(http.StatusPaymentRequired, codePaymentDeclined, "Payment declined",
			"The payment provider declined the charge. The declined payment is recorded.")
		p.Payment = toPaymentResponse(o.Payment)
		status, body = p.Status, p
	case app.ChargeFailed:
		// 402 like a decline: not paid, for good, and the payment is
		// recorded; the code tells a refused request from a declined charge.
		p := newProblem(http.StatusPaymentRequired, codePaymentFailed, "Payment failed",
			"The payment provider refused the charge request for good and holds no charge for it: nothing was charged. The failed payment is recorded; a new attempt needs a new externalPaymentId.")
		p.Payment = toPaymentResponse(o.Payment)
		status, body = p.Status, p
	case app.ChargeExternalPaymentConflict:
		// The same bytes whether the id is the client's own payment for
		// another charge or another client's payment: nothing of that
		// payment, nor whose it is (docs/design.md, "Per-client scope").
		p := newProblem(http.StatusConflict, codeExternalPaymentConflict, "External payment conflict",
			"This externalPaymentId cannot be used for this charge. Nothing was charged; check the id (a new idempotency key gets the same answer).")
		status, body = p.Status, p
	case app.ChargeOrderAlreadyPaid:
		p := newProblem(http.StatusConflict, codeOrderAlreadyPaid, "Order already paid",
			"This order is already paid under another external payment. Nothing was charged.")
		status, body = p.Status, p
	default:
		return app.StoredResponse{}, errUnknownOutcome("charge", int(o.Kind))
	}
	return storedResponse("charge", status, body)
}

// errUnknownOutcome: an outcome kind the encoder does not know.
func errUnknownOutcome(command string, kind int) error {
	return fmt.Errorf("encode %s outcome: unknown kind %d", command, kind)
}

// storedResponse renders body as the stored response with status.
func storedResponse(command string, status int, body any) (app.StoredResponse, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return app.StoredResponse{}, fmt.Errorf("encode %s outcome: %w", command, err)
	}
	return app.StoredResponse{StatusCode: status, Body: b}, nil
}

var (
	_ app.ChargeResponses = ResponseEncoder{}
	_ app.RefundResponses = ResponseEncoder{}
)
