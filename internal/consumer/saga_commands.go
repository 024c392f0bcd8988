package consumer

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/codes"

	"github.com/example/payment-service/internal/app"
)

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
