package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/shopspring/decimal"
	"go.opentelemetry.io/otel/codes"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/strictjson"
)

// The saga's payment commands: their consumer (SagaConsumer), then their
// wire format and the replies that answer them.

// SagaStepper is the use case the commands are handed to: app.SagaSteps.
type SagaStepper interface {
	// Charge carries out a charge step; firstTried bounds its wait for
	// the order.
	Charge(ctx context.Context, c app.SagaCharge, firstTried time.Time) (app.SagaResult, error)
	// Compensate carries out a compensation.
	Compensate(ctx context.Context, c app.SagaCompensation) (app.SagaResult, error)
	// Invalid answers a command that cannot be carried out, once per
	// eventID.
	Invalid(ctx context.Context, eventID uuid.UUID, step app.SagaStep, detail string) (app.SagaResult, error)
}

// SagaConsumer consumes the payment commands topic (the saga transport,
// R-DIST-IDEM-1's third id) until its context ends.
//
// What it adds to the order events consumer's loop:
//
//   - Each command is carried out by app.SagaSteps, which deduplicates it
//     on its step's (sagaId, stepName): a redelivered or re-sent command
//     moves no money again and gets its stored reply again. The offset is
//     committed once every command of the batch is durably answered or
//     claimed: a step whose outcome is unknown is claimed, and its reply
//     comes when whoever settles it (a retry, the completer, the
//     provider's event) records it; the topic moves on meanwhile.
//   - A batch's commands are carried out saga by saga: the commands of one
//     saga (one message key, so one partition) one after the other, in
//     offset order, also across batches; different sagas at once, up to
//     Workers.
//   - The next batch is fetched and started while the batches before it
//     are carried out (up to Workers batches in flight): a saga's next
//     command waits for its own saga only, not for the slowest step of
//     the batch before (measured: the wait for that step was most of a
//     step's time, docs/benchmarks.md). Offsets are committed batch by
//     batch, in fetch order, each only once the batches before it are
//     committed.
//   - A step that must be tried again (the provider did not act, another
//     payment of the order is in flight, the order is not projected yet,
//     the database is down) is retried with backoff; its own saga and the
//     commits of its batch and the later ones wait for it, and the other
//     sagas go on until Workers batches are in flight.
//   - A command that cannot be read goes to the dead-letter topic with the
//     reason in its headers, as an order event does; if its sagaId and
//     stepName can be read, the step is answered failed (invalid-command)
//     too, once per record.
type SagaConsumer struct {
	*loop
	steps   SagaStepper
	workers int
	metrics *sagaMetrics

	// The batches in flight: a batch is fetched while the ones before it
	// are still being carried out, so that a saga's next command does not
	// wait for the slowest step of the batch before it. Offsets are still
	// committed batch by batch in fetch order, each once every batch
	// before it is committed.
	batches chan struct{} // one token per batch in flight, up to workers
	running chan struct{} // one token per saga being carried out, up to workers
	last    chan bool     // the latest batch's outcome, sent once it is committed or given up; Run's goroutine only
	mu      sync.Mutex
	tails   map[uuid.UUID]*sagaTail // the latest batch's turn of each saga in flight
	dltMu   sync.Mutex              // the dead-letter producer, shared by the batches
	flight  sync.WaitGroup
}

// sagaTail is one batch's turn of one saga: the saga's commands of the
// next batch wait for it, and are not carried out unless it ended well.
type sagaTail struct {
	done chan struct{}
	ok   bool // set before done is closed
}

// DefaultSagaWorkers is how many sagas are carried out at once, and how
// many batches at most are in flight.
const DefaultSagaWorkers = 16

// Steps of the saga consumer, as the "step" label of its retries metric.
const (
	stepSagaCharge     = "charging"
	stepSagaCompensate = "compensating"
	stepSagaInvalid    = "answering an invalid command"
)

// NewSagaConsumer builds the consumer of cfg.Topic (PAYMENT_COMMANDS_TOPIC)
// with up to workers sagas at once (DefaultSagaWorkers if 0), and registers
// its metrics on reg. cfg.GroupID names it in processed_event too.
func NewSagaConsumer(cfg Config, steps SagaStepper, workers int, reg prometheus.Registerer, logger *slog.Logger) (*SagaConsumer, error) {
	reasons := []string{ReasonInvalidJSON, ReasonInvalidEventID, ReasonUnknownEventType, ReasonInvalidAmount, ReasonInvalidField, ReasonDuplicateKey, ReasonRejected}
	l, err := newLoop(cfg, "saga commands consumer", "saga_commands", reasons,
		[]string{stepDeadLetter, stepSagaCharge, stepSagaCompensate, stepSagaInvalid}, reg, logger)
	if err != nil {
		return nil, err
	}
	m, err := newSagaMetrics(reg)
	if err != nil {
		return nil, err
	}
	if workers <= 0 {
		workers = DefaultSagaWorkers
	}
	c := &SagaConsumer{loop: l, steps: steps, workers: workers, metrics: m,
		batches: make(chan struct{}, workers), running: make(chan struct{}, workers),
		tails: map[uuid.UUID]*sagaTail{}}
	// Run's reader is closed only once every batch in flight is over.
	l.drain = c.flight.Wait
	return c, nil
}

// Run consumes until ctx ends; see Consumer.Run.
func (c *SagaConsumer) Run(ctx context.Context) error {
	return c.run(ctx, c.process)
}

// process starts one batch: it reads the batch and answers what cannot be
// carried out, then leaves the batch's sagas to run beside the batches in
// flight (up to workers batches, so that each can have a worker) and
// returns for the next fetch. It returns without starting the batch when
// ctx ends first.
func (c *SagaConsumer) process(ctx context.Context, batch []kafka.Message) {
	ctx, span := c.traceBatchOf(ctx, batch, false)
	// As for the order events: work on a started command runs to its end;
	// only the waits between attempts end with ctx.
	work := context.WithoutCancel(ctx)

	var poisoned []deadRecord
	var invalid []sagaPoison
	bySaga := map[uuid.UUID][]sagaCommand{}
	var sagas []uuid.UUID
	for _, m := range batch {
		cmd, bad := decodeSagaCommand(m.Value)
		if bad != nil {
			poisoned = append(poisoned, deadRecord{msg: m, reason: bad.PoisonError})
			if bad.step != nil {
				if bad.eventID == uuid.Nil {
					// Once per record, however often it is delivered.
					bad.eventID = recordID(m)
				}
				invalid = append(invalid, *bad)
			}
			continue
		}
		cmd.msg = m
		saga := cmd.step().SagaID
		if _, ok := bySaga[saga]; !ok {
			sagas = append(sagas, saga)
		}
		bySaga[saga] = append(bySaga[saga], cmd)
	}
	if err := c.deadLetterShared(ctx, work, poisoned); err != nil {
		span.end()
		return
	}
	for _, bad := range invalid {
		err := c.retry(ctx, stepSagaInvalid, never, 0, func() error {
			_, err := c.steps.Invalid(work, bad.eventID, *bad.step, bad.Reason+": "+bad.Detail)
			return err
		})
		if err != nil {
			span.end()
			return
		}
		c.metrics.steps.WithLabelValues("invalid", string(app.ReplyFailed)).Inc()
	}

	select {
	case c.batches <- struct{}{}:
	case <-ctx.Done():
		span.end()
		return
	}
	// Each saga's turn in this batch comes after its turn in the batch
	// before, if that one is still in flight.
	prev := make(map[uuid.UUID]*sagaTail, len(sagas))
	mine := make(map[uuid.UUID]*sagaTail, len(sagas))
	c.mu.Lock()
	for _, saga := range sagas {
		prev[saga] = c.tails[saga]
		mine[saga] = &sagaTail{done: make(chan struct{})}
		c.tails[saga] = mine[saga]
	}
	c.mu.Unlock()
	before, outcome := c.last, make(chan bool, 1)
	c.last = outcome

	c.flight.Add(1)
	go func() {
		defer c.flight.Done()
		defer func() { <-c.batches }()
		defer span.end()
		var rejected []deadRecord
		var mu sync.Mutex
		done := c.each(ctx, sagas, prev, mine, func(saga uuid.UUID) bool {
			for _, cmd := range bySaga[saga] {
				err := c.traced(ctx, work, span, cmd)
				if errors.Is(err, app.ErrDataRejected) {
					mu.Lock()
					rejected = append(rejected, deadRecord{msg: cmd.msg, reason: &PoisonError{Reason: ReasonRejected, Detail: err.Error()}})
					mu.Unlock()
					continue
				}
				if err != nil {
					return false
				}
			}
			return true
		})
		if done {
			done = c.deadLetterShared(ctx, work, rejected) == nil
		}
		// The offsets of this batch are committed after every batch
		// before it is: committing past a command still being carried out
		// would lose it in a crash.
		if before != nil && !<-before {
			done = false
		}
		if done {
			c.setState(nil)
			c.commit(work, batch, span)
		}
		outcome <- done
	}()
}

// deadLetterShared is deadLetterAll for the batches in flight, which
// share the dead-letter producer.
func (c *SagaConsumer) deadLetterShared(ctx, work context.Context, recs []deadRecord) error {
	if len(recs) == 0 {
		return nil
	}
	c.dltMu.Lock()
	defer c.dltMu.Unlock()
	return c.deadLetterAll(ctx, work, recs)
}

// each runs fn for every saga, each once its turn in the batch before
// (prev) has ended well, up to c.workers sagas at once across the batches
// in flight, and reports whether every call returned true. Each saga's
// turn here (mine) ends when its call does; a saga whose turn before did
// not end well is not carried out here.
func (c *SagaConsumer) each(ctx context.Context, sagas []uuid.UUID, prev, mine map[uuid.UUID]*sagaTail, fn func(uuid.UUID) bool) bool {
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := true
	for _, saga := range sagas {
		wg.Go(func() {
			t := mine[saga]
			defer func() {
				close(t.done)
				c.mu.Lock()
				if c.tails[saga] == t {
					delete(c.tails, saga)
				}
				c.mu.Unlock()
				if !t.ok {
					mu.Lock()
					ok = false
					mu.Unlock()
				}
			}()
			if p := prev[saga]; p != nil {
				select {
				case <-p.done:
					if !p.ok {
						return
					}
				case <-ctx.Done():
					return
				}
			}
			select {
			case c.running <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-c.running }()
			t.ok = fn(saga)
		})
	}
	wg.Wait()
	return ok
}

// traced carries out cmd under its record's span (traceRecord): the trace
// its orchestrator started runs on through the provider call and into the
// reply, whose outbox row keeps the span's context.
func (c *SagaConsumer) traced(ctx, work context.Context, batch *batchSpan, cmd sagaCommand) error {
	recCtx, span := c.traceRecord(work, cmd.msg, batch)
	if span == nil {
		return c.carryOut(ctx, work, cmd)
	}
	defer span.End()
	err := c.carryOut(ctx, recCtx, cmd)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// carryOut carries out one command, retrying until it is answered or
// claimed. It returns ctx's error if ctx ends first, and
// app.ErrDataRejected once the database has rejected the command
// MaxAttempts times (the command is then dead-lettered).
func (c *SagaConsumer) carryOut(ctx, work context.Context, cmd sagaCommand) error {
	kind, what := "charge", stepSagaCharge
	if cmd.compensate != nil {
		kind, what = "compensation", stepSagaCompensate
	}
	firstTried := time.Now()
	var res app.SagaResult
	err := c.retry(ctx, what, sagaRejected, c.cfg.MaxAttempts, func() error {
		attempt, cancel := context.WithTimeout(work, 30*time.Second)
		defer cancel()
		var err error
		if cmd.charge != nil {
			res, err = c.steps.Charge(attempt, *cmd.charge, firstTried)
		} else {
			res, err = c.steps.Compensate(attempt, *cmd.compensate)
		}
		return err
	})
	if err != nil {
		return err
	}
	c.metrics.record(kind, res)
	return nil
}

// sagaRejected says whether a command's failure counts towards its
// MaxAttempts: the database rejected the command's data. A step that asks
// to be tried again (app.ErrSagaRetry) is tried again without limit,
// whatever its cause, even one the database rejected: the saga's steps
// wrap their cause with %w, so errors.Is sees both.
func sagaRejected(err error) bool {
	return errors.Is(err, app.ErrDataRejected) && !errors.Is(err, app.ErrSagaRetry)
}

// never: no failure is final.
func never(error) bool { return false }

// recordID is a record's own id, for a command whose eventId cannot be
// read: the same for every delivery of the record.
func recordID(m kafka.Message) uuid.UUID {
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte("kafka:"+m.Topic+"/"+strconv.Itoa(m.Partition)+"/"+strconv.FormatInt(m.Offset, 10)))
}

// sagaMetrics are the saga consumer's own series.
type sagaMetrics struct {
	steps *prometheus.CounterVec
}

func newSagaMetrics(reg prometheus.Registerer) (*sagaMetrics, error) {
	m := &sagaMetrics{steps: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "saga_steps_total",
		Help: "Saga commands carried out by the commands consumer, by kind (charge, compensation, invalid) and outcome: the reply type, \"pending\" (claimed; the reply comes when the outcome is settled) or \"replayed\" (a delivered-again or re-sent step answered by its stored reply).",
	}, []string{"kind", "outcome"})}
	for _, kind := range []string{"charge", "compensation"} {
		for _, outcome := range []string{string(app.SagaPending), "replayed"} {
			m.steps.WithLabelValues(kind, outcome)
		}
	}
	if err := reg.Register(m.steps); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *sagaMetrics) record(kind string, res app.SagaResult) {
	outcome := string(res.Reply.Type)
	switch {
	case res.Outcome == app.SagaPending:
		outcome = string(app.SagaPending)
	case res.Replayed:
		outcome = "replayed"
	}
	m.steps.WithLabelValues(kind, outcome).Inc()
}

// The saga transport's wire format (api/asyncapi.yaml, payment.commands and
// payment.replies): the commands an orchestrator sends, and the replies
// the service answers them with.

// Command types on payment.commands.
const (
	// EventTypeChargeOrder is a charge step.
	EventTypeChargeOrder = "ChargeOrder.v1"
	// EventTypeCompensateCharge is the compensation of a charge step.
	EventTypeCompensateCharge = "CompensateCharge.v1"
)

// sagaCommand is one decoded command: a charge or a compensation.
type sagaCommand struct {
	charge     *app.SagaCharge
	compensate *app.SagaCompensation
	msg        kafka.Message // the record that carried it
}

// step is the command's step.
func (c sagaCommand) step() app.SagaStep {
	if c.charge != nil {
		return c.charge.Step
	}
	return c.compensate.Step
}

// sagaPoison is a command that cannot be carried out, and the step it
// names if that much could be read (then it is answered failed too).
type sagaPoison struct {
	*PoisonError
	eventID uuid.UUID // uuid.Nil when unreadable
	step    *app.SagaStep
}

// decodeSagaCommand parses and validates one command. Member names match
// exactly, and a name repeated in one object is refused, as for the order
// events (parseWire says why).
func decodeSagaCommand(value []byte) (sagaCommand, *sagaPoison) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(value, &m); err != nil {
		return sagaCommand{}, &sagaPoison{PoisonError: &PoisonError{Reason: ReasonInvalidJSON, Detail: err.Error()}}
	}
	if dups := strictjson.DuplicateKeys(value); len(dups) > 0 {
		return sagaCommand{}, &sagaPoison{PoisonError: &PoisonError{Reason: ReasonDuplicateKey,
			Detail: strings.Join(dups, ", ") + " appears more than once in the command; readers disagree on which value counts"}}
	}
	bad := &sagaPoison{}
	fail := func(reason, format string, args ...any) (sagaCommand, *sagaPoison) {
		bad.PoisonError = &PoisonError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
		return sagaCommand{}, bad
	}
	// What names the step first, so that a failed reply can name it.
	eventID, err := parseUUID(m["eventId"])
	if err == nil && eventID != uuid.Nil {
		bad.eventID = eventID
	}
	sagaID, sagaErr := parseUUID(m["sagaId"])
	var name string
	nameErr := json.Unmarshal(m["stepName"], &name)
	if sagaErr != nil || sagaID == uuid.Nil {
		return fail(ReasonInvalidField, "sagaId must be a UUID, got %s", show(m["sagaId"]))
	}
	step, err := app.NewSagaStep(sagaID, name)
	if nameErr != nil || err != nil {
		return fail(ReasonInvalidField, "stepName must be a string of 1 to %d printable ASCII characters, got %s", app.MaxSagaStepName, show(m["stepName"]))
	}
	bad.step = &step
	if bad.eventID == uuid.Nil {
		return fail(ReasonInvalidEventID, "eventId must be a UUID, got %s", show(m["eventId"]))
	}
	if _, err := parseOccurredAt(m["occurredAt"]); err != nil {
		return fail(ReasonInvalidField, "occurredAt %v", err)
	}
	var eventType string
	_ = json.Unmarshal(m["eventType"], &eventType)
	switch eventType {
	case EventTypeChargeOrder:
		charge, poison := decodeCharge(m)
		if poison != nil {
			bad.PoisonError = poison
			return sagaCommand{}, bad
		}
		return sagaCommand{charge: &app.SagaCharge{EventID: eventID, Step: step, Charge: charge}}, nil
	case EventTypeCompensateCharge:
		var compensates string
		if err := json.Unmarshal(m["compensates"], &compensates); err != nil {
			return fail(ReasonInvalidField, "compensates must be the stepName of a charge step, got %s", show(m["compensates"]))
		}
		if _, err := app.NewSagaStep(sagaID, compensates); err != nil {
			return fail(ReasonInvalidField, "compensates must be the stepName of a charge step, got %s", show(m["compensates"]))
		}
		return sagaCommand{compensate: &app.SagaCompensation{EventID: eventID, Step: step, Compensates: compensates}}, nil
	default:
		return fail(ReasonUnknownEventType, "eventType %s is neither %s nor %s", show(m["eventType"]), EventTypeChargeOrder, EventTypeCompensateCharge)
	}
}

// decodeCharge reads a ChargeOrder.v1's business fields.
func decodeCharge(m map[string]json.RawMessage) (domain.Charge, *PoisonError) {
	orderID, err := parsePositiveInt(m["orderId"])
	if err != nil {
		return domain.Charge{}, &PoisonError{Reason: ReasonInvalidField, Detail: "orderId " + err.Error()}
	}
	customerID, err := parsePositiveInt(m["customerId"])
	if err != nil {
		return domain.Charge{}, &PoisonError{Reason: ReasonInvalidField, Detail: "customerId " + err.Error()}
	}
	var currency, provider, external string
	if err := json.Unmarshal(m["currency"], &currency); err != nil {
		return domain.Charge{}, &PoisonError{Reason: ReasonInvalidField, Detail: "currency must be a string, got " + show(m["currency"])}
	}
	if len(m["amount"]) == 0 || m["amount"][0] != '"' {
		// A decimal string, as in the HTTP API: a JSON number passes
		// through a float in many producers.
		return domain.Charge{}, &PoisonError{Reason: ReasonInvalidAmount, Detail: "amount must be a decimal string, got " + show(m["amount"])}
	}
	amount, err := parseAmount(m["amount"])
	if err != nil {
		return domain.Charge{}, &PoisonError{Reason: ReasonInvalidAmount, Detail: "amount " + err.Error()}
	}
	money, err := domain.NewMoney(amount, domain.Currency(currency))
	if err != nil {
		return domain.Charge{}, &PoisonError{Reason: ReasonInvalidAmount, Detail: err.Error()}
	}
	if err := json.Unmarshal(m["paymentProvider"], &provider); err != nil {
		return domain.Charge{}, &PoisonError{Reason: ReasonInvalidField, Detail: "paymentProvider must be a string, got " + show(m["paymentProvider"])}
	}
	if err := json.Unmarshal(m["externalPaymentId"], &external); err != nil {
		return domain.Charge{}, &PoisonError{Reason: ReasonInvalidField, Detail: "externalPaymentId must be a string, got " + show(m["externalPaymentId"])}
	}
	charge, err := domain.NewCharge(domain.OrderID(orderID), domain.CustomerID(customerID), money,
		domain.ProviderName(provider), domain.ExternalPaymentID(external))
	if err != nil {
		return domain.Charge{}, &PoisonError{Reason: ReasonInvalidField, Detail: err.Error()}
	}
	// Optional: absent is automatic, a one-step charge, as it was before
	// a step could authorize.
	if raw, ok := m["captureMethod"]; ok {
		var method string
		if err := json.Unmarshal(raw, &method); err != nil || (method != string(domain.CaptureAutomatic) && method != string(domain.CaptureManual)) {
			return domain.Charge{}, &PoisonError{Reason: ReasonInvalidField, Detail: "captureMethod must be automatic or manual, got " + show(raw)}
		}
		if method == string(domain.CaptureManual) {
			charge.CaptureMethod = domain.CaptureManual
		}
	}
	return charge, nil
}

// parseOccurredAt reads an RFC 3339 time. A command's occurredAt orders
// nothing (its step's identity does that), so only its form is checked.
func parseOccurredAt(raw json.RawMessage) (time.Time, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return time.Time{}, fmt.Errorf("must be an RFC 3339 string, got %s", show(raw))
	}
	return time.Parse(time.RFC3339Nano, s)
}

// sagaReplyV1 is the value of every reply on payment.replies: the wire
// contract with the orchestrators (api/asyncapi.yaml). A field a reply
// type does not carry is absent. Add optional fields only; anything else is
// a new reply type (.v2).
type sagaReplyV1 struct {
	EventID       uuid.UUID `json:"eventId"`
	EventType     string    `json:"eventType"`
	SagaID        uuid.UUID `json:"sagaId"`
	StepName      string    `json:"stepName"`
	OccurredAt    time.Time `json:"occurredAt"`
	PaymentID     int64     `json:"paymentId,omitempty"`
	OrderID       int64     `json:"orderId,omitempty"`
	Amount        *string   `json:"amount,omitempty"`
	Currency      string    `json:"currency,omitempty"`
	Code          string    `json:"code,omitempty"`
	Detail        string    `json:"detail,omitempty"`
	Compensates   string    `json:"compensates,omitempty"`
	CompensatedBy string    `json:"compensatedBy,omitempty"`
	RefundID      int64     `json:"refundId,omitempty"`
	Voided        bool      `json:"voided,omitempty"`
}

// replyStatus is the stored status of every reply: a reply has no HTTP
// status, and its key is never an HTTP request's.
const replyStatus = http.StatusOK

// SagaReplies implements app.SagaReplies: a reply's stored response is its
// message value, byte for byte.
type SagaReplies struct{}

// carriesAmount: the reply types with an amount.
func carriesAmount(t app.SagaReplyType) bool {
	return t == app.ReplyCharged || t == app.ReplyAuthorized || t == app.ReplyDeclined || t == app.ReplyCompensated
}

func (SagaReplies) EncodeSagaReply(r app.SagaReply) (app.StoredResponse, error) {
	v := sagaReplyV1{
		EventID: r.EventID, EventType: string(r.Type), SagaID: r.Step.SagaID, StepName: r.Step.Name,
		OccurredAt: r.OccurredAt.UTC(), PaymentID: int64(r.PaymentID), OrderID: int64(r.OrderID),
		Code: r.Code, Detail: r.Detail, Compensates: r.Compensates, CompensatedBy: r.CompensatedBy, RefundID: int64(r.RefundID),
		Voided: r.Voided,
	}
	if carriesAmount(r.Type) {
		amount := "0"
		if r.Amount.IsPositive() {
			m, err := domain.NewMoney(r.Amount, r.Currency)
			if err != nil {
				return app.StoredResponse{}, fmt.Errorf("encode %s: %w", r.Type, err)
			}
			amount, v.Currency = m.AmountString(), string(r.Currency)
		}
		v.Amount = &amount
	}
	body, err := json.Marshal(v)
	if err != nil {
		return app.StoredResponse{}, fmt.Errorf("encode %s: %w", r.Type, err)
	}
	return app.StoredResponse{StatusCode: replyStatus, Body: body,
		Publish: &app.Publication{EventID: r.EventID, EventType: string(r.Type), Key: r.Step.SagaID.String()}}, nil
}

func (SagaReplies) DecodeSagaReply(stored app.StoredResponse) (app.SagaReply, app.StoredResponse, error) {
	var v sagaReplyV1
	if err := json.Unmarshal(stored.Body, &v); err != nil {
		return app.SagaReply{}, app.StoredResponse{}, fmt.Errorf("decode a stored reply: %w", err)
	}
	if v.EventID == uuid.Nil || v.EventType == "" {
		return app.SagaReply{}, app.StoredResponse{}, errors.New("decode a stored reply: it is not a saga reply")
	}
	r := app.SagaReply{
		EventID: v.EventID, Type: app.SagaReplyType(v.EventType), Step: app.SagaStep{SagaID: v.SagaID, Name: v.StepName},
		PaymentID: domain.PaymentID(v.PaymentID), OrderID: domain.OrderID(v.OrderID), Currency: domain.Currency(v.Currency),
		Code: v.Code, Detail: v.Detail, Compensates: v.Compensates, CompensatedBy: v.CompensatedBy,
		RefundID: domain.RefundID(v.RefundID), Voided: v.Voided, OccurredAt: v.OccurredAt,
	}
	if v.Amount != nil {
		amount, err := decimal.NewFromString(*v.Amount)
		if err != nil {
			return app.SagaReply{}, app.StoredResponse{}, fmt.Errorf("decode a stored reply's amount: %w", err)
		}
		r.Amount = amount
	}
	stored.Publish = &app.Publication{EventID: v.EventID, EventType: v.EventType, Key: v.SagaID.String()}
	return r, stored, nil
}

var _ app.SagaReplies = SagaReplies{}
