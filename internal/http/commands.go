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

	"github.com/go-playground/validator/v10"
	"github.com/labstack/echo/v4"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/strictjson"
)

// What every money command's handler shares, so that each command's own
// file holds only its request, its response and its route: the
// Idempotency-Key header, the JSON body read strictly and validated (every
// problem named at once, nothing stored for a bad request), the stored
// answer sent as it is (respond), and the encoder of stored answers.

// headerIdempotencyKey is the request header every money command carries
// (R-DIST-IDEM-3).
const headerIdempotencyKey = "Idempotency-Key"

// maxIdempotencyKeyLength bounds the key as stored: the decoded key, not the
// header's text, so `"k"` and `k` are held to the same limit.
const maxIdempotencyKeyLength = 255

// idempotencyKey reads the Idempotency-Key header of a money command, or
// returns the 400 problem that names it. Every handler that takes a key
// (POST /payments, and each command after it) calls this, so they all
// accept the same keys and refuse the rest with the same answers.
func idempotencyKey(h http.Header) (string, error) {
	values := h.Values(headerIdempotencyKey)
	if len(values) == 0 || values[0] == "" {
		return "", newProblem(http.StatusBadRequest, codeIdempotencyKeyMissing, "Idempotency key missing",
			"Send an Idempotency-Key header, generated once per operation and reused on every retry.")
	}
	if len(values) > 1 {
		return "", invalidIdempotencyKey(errors.New("it appears more than once"))
	}
	key, err := parseIdempotencyKey(values[0])
	if err != nil {
		return "", invalidIdempotencyKey(err)
	}
	return key, nil
}

func invalidIdempotencyKey(why error) *Problem {
	return newProblem(http.StatusBadRequest, codeIdempotencyKeyInvalid, "Idempotency key invalid",
		"The Idempotency-Key header is invalid: "+why.Error()+". Send it once, as a quoted string "+
			`("8e03978e-...") or bare (8e03978e-...), holding 1 to 255 printable ASCII characters.`)
}

// parseIdempotencyKey turns one Idempotency-Key field value (as net/http
// hands it over: leading and trailing whitespace already gone) into the key.
//
// The IETF draft (draft-ietf-httpapi-idempotency-key-header-07, section 2.1)
// makes the value an RFC 8941 Item whose bare item is a String. A value
// that starts with a double quote is parsed as one (RFC 8941 section 4.2.5),
// and the key is the decoded String, so `"k"` and `k` are one key. A value
// that does not start with a quote is taken as it is: the draft does not
// allow that, but Stripe's clients and pkg/paymentclient send it (decision
// 0019).
//
// Parameters after the String (`"k";x=1`) are refused: the draft defines
// none, so a sender that adds one means something this service would
// silently drop, and two values that differ only in a parameter would name
// one key (decision 0019).
func parseIdempotencyKey(value string) (string, error) {
	var key string
	if strings.HasPrefix(value, `"`) {
		s, rest, err := parseSFString(value)
		if err != nil {
			return "", err
		}
		switch {
		case strings.HasPrefix(rest, ";"):
			return "", errors.New("parameters after the string (;name=value) are not supported")
		case rest != "":
			return "", errors.New("text follows the closing quote")
		}
		key = s
	} else {
		key = value
	}
	if key == "" {
		return "", errors.New("it is empty")
	}
	if len(key) > maxIdempotencyKeyLength {
		return "", errors.New("it is longer than 255 characters")
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return "", errors.New("it holds a character that is not printable ASCII")
		}
	}
	return key, nil
}

// parseSFString parses an RFC 8941 sf-string at the start of s, which must
// be a double quote, and returns the decoded string and what follows it:
//
//	sf-string = DQUOTE *chr DQUOTE
//	chr       = unescaped / escaped
//	unescaped = %x20-21 / %x23-5B / %x5D-7E
//	escaped   = "\" ( DQUOTE / "\" )
func parseSFString(s string) (decoded, rest string, err error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			if i+1 == len(s) || s[i+1] != '"' && s[i+1] != '\\' {
				return "", "", errors.New(`a backslash escapes something other than " or \`)
			}
			i++
			b.WriteByte(s[i])
		case c == '"':
			return b.String(), s[i+1:], nil
		case c < 0x20 || c > 0x7e:
			return "", "", errors.New("the string holds a character that is not printable ASCII")
		default:
			b.WriteByte(c)
		}
	}
	return "", "", errors.New("the closing quote is missing")
}

// maxBodyBytes caps a request body; larger is 413.
const maxBodyBytes = 64 << 10

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
	switch {
	case result.Response.StatusCode >= 400:
		contentType = contentTypeProblem
		linkProblemDocs(c.Response().Header(), storedProblemCode(result.Response.Body))
	case result.Response.StatusCode == http.StatusAccepted:
		// Received by the provider, decided later: where to read it
		// (received.go).
		if loc := pendingLocation(c, result.Response.Body); loc != "" {
			c.Response().Header().Set(echo.HeaderLocation, loc)
		}
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

// positiveIDParam reads a path parameter that must be a positive int64, or
// returns the validation problem naming it.
func positiveIDParam(c echo.Context, name string) (int64, error) {
	id, err := strconv.ParseInt(c.Param(name), 10, 64)
	if err != nil || id <= 0 {
		return 0, validationProblem([]FieldError{{Field: name, Message: "must be a positive integer"}})
	}
	return id, nil
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
	case "paymentmethod":
		return fmt.Sprintf("must be 1 to %d letters, digits or underscores, such as pm_card_visa", domain.MaxPaymentMethodLength)
	default:
		return "is invalid (" + fe.Tag() + ")"
	}
}

// apiProviders are the payment providers the API names (the enum of
// paymentProvider in api/openapi.yaml). A charge naming another is invalid
// (400); one naming a provider of these that this service does not charge
// through is provider-not-offered (422), decided by the use case, which
// holds the adapters.
var apiProviders = []domain.ProviderName{sandboxProvider, stripeProvider}

// newValidator builds the request validator: JSON field names in errors, a
// decimal amount rule, and the providers the API names.
func newValidator() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		return name
	})
	known := map[string]bool{}
	for _, p := range apiProviders {
		known[string(p)] = true
	}
	must(v.RegisterValidation("provider", func(fl validator.FieldLevel) bool {
		return known[fl.Field().String()]
	}))
	must(v.RegisterValidation("amount", func(fl validator.FieldLevel) bool {
		return validAmount(fl.Field().String())
	}))
	must(v.RegisterValidation("paymentmethod", func(fl validator.FieldLevel) bool {
		return validPaymentMethod(fl.Field().String())
	}))
	return v
}

// validPaymentMethod accepts a provider's payment method id as the spec's
// pattern ^[A-Za-z0-9_]{1,255}$ writes it (Stripe's pm_...).
func validPaymentMethod(s string) bool {
	if len(s) == 0 || len(s) > domain.MaxPaymentMethodLength {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
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

// ResponseEncoder is the HTTP API's app.Transport: it renders the
// commands' outcomes into the exact responses that are stored with the
// idempotency key and replayed byte for byte. Bodies hold nothing
// request-specific (no request id, no time of the reply, nothing of the
// key), so the stored bytes are right for every replay.
type ResponseEncoder struct{}

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

var _ app.Transport = ResponseEncoder{}
