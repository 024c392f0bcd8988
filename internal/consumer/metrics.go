package consumer

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/example/payment-service/internal/app"
)

// loopMetrics are the series every consumer has (loop.go), named
// <prefix>_*: order_events_* for the order events consumer.
type loopMetrics struct {
	deadLettered   *prometheus.CounterVec
	retries        *prometheus.CounterVec
	commitFailures prometheus.Counter
	// deadLetterRefused counts records the dead-letter topic refused for
	// good and that were given up (loop.go, deadLetterAll).
	deadLetterRefused prometheus.Counter
}

func newLoopMetrics(reg prometheus.Registerer, prefix, what string, reasons, steps []string) (*loopMetrics, error) {
	m := &loopMetrics{
		deadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "_dead_lettered_total",
			Help: "Records the " + what + " sent to the dead-letter topic, by reason.",
		}, []string{"reason"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "_retries_total",
			Help: "Failed attempts of the " + what + " that were retried with backoff (database or dead-letter topic unavailable), by step.",
		}, []string{"step"}),
		commitFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: prefix + "_offset_commit_failures_total",
			Help: "Offset commits of the " + what + " that failed after the batch was handled; the batch is redelivered and skipped.",
		}),
		deadLetterRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: prefix + "_dead_letter_refused_total",
			Help: "Records the dead-letter topic of the " + what + " refused for good (too large, not authorized) on every attempt, given up and left only in the original topic at the logged offset. Alert on any increase.",
		}),
	}
	for _, reason := range reasons {
		m.deadLettered.WithLabelValues(reason) // export zeros, so alerts see the series
	}
	for _, step := range steps {
		m.retries.WithLabelValues(step) // export zeros, so alerts see the series
	}
	for _, c := range []prometheus.Collector{m.deadLettered, m.retries, m.commitFailures, m.deadLetterRefused} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// registerLag exports kafka-go's lag gauge: records between the reader's
// position and the high-water mark, as of the partition fetched last.
// kafka-go keeps one such number per reader, not one per partition.
func (m *loopMetrics) registerLag(reg prometheus.Registerer, prefix, what string, r *kafka.Reader) error {
	return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: prefix + "_consumer_lag",
		Help: "Records not yet fetched on the partition the " + what + "'s reader fetched last (kafka-go Reader.Stats().Lag).",
	}, func() float64 { return float64(r.Stats().Lag) }))
}

// metrics are the order events consumer's Prometheus series.
type metrics struct {
	*loopMetrics
	applied    prometheus.Counter
	superseded prometheus.Counter
	duplicates prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, common *loopMetrics) (*metrics, error) {
	m := &metrics{
		loopMetrics: common,
		applied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "order_events_applied_total",
			Help: "Order events applied to order_projection for the first time (written, or recorded as superseded by a newer event).",
		}),
		superseded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "order_events_superseded_total",
			Help: "Applied order events that did not change the projection because a newer event of the order was already there (out-of-order delivery).",
		}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "order_events_duplicates_total",
			Help: "Order events skipped because processed_event already had their eventId (redelivery, R-DIST-IDEM-2).",
		}),
	}
	for _, c := range []prometheus.Collector{m.applied, m.superseded, m.duplicates} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) record(r app.ApplyResult) {
	m.applied.Add(float64(r.Written + r.Superseded))
	m.superseded.Add(float64(r.Superseded))
	m.duplicates.Add(float64(r.Duplicates))
}
