package outbox

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the relay's Prometheus series. A nil *Metrics records nothing.
type Metrics struct {
	publishedTotal *prometheus.CounterVec
	lag            prometheus.Gauge
	leader         prometheus.Gauge
	delay          prometheus.Histogram
}

// NewMetrics registers the relay's series on reg. topic is the configured
// PAYMENT_EVENTS_TOPIC: the label of the lag and leader gauges (which are
// about the whole outbox), and the first series of the published counter,
// which counts per topic the rows were addressed to.
//
// Alert on max(outbox_relay_lag_seconds) growing, and on
// sum(outbox_relay_leader) == 0 for longer than a restart: the lag is
// measured by the leader only, so without one it reads 0.
func NewMetrics(reg prometheus.Registerer, topic string) *Metrics {
	labels := prometheus.Labels{"topic": topic}
	m := &Metrics{
		publishedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_events_published_total",
			Help: "Outbox events published to Kafka and acknowledged, by the topic stored in the row (a republished event counts again).",
		}, []string{"topic"}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "outbox_relay_lag_seconds",
			Help:        "Age of the oldest unpublished outbox event at the leader's last read; 0 when none is pending.",
			ConstLabels: labels,
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "outbox_relay_leader",
			Help:        "1 while this replica's relay holds the leadership, else 0.",
			ConstLabels: labels,
		}),
	}
	m.delay = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "outbox_event_publish_delay_seconds",
		Help: "Time from an outbox row's created_at (the start of the transaction that recorded the outcome) to the broker's acknowledgement of its event; a republished event is observed again.",
		// From a NOTIFY wake-up (milliseconds) to a missed one waiting for
		// the safety-net poll (OUTBOX_POLL_INTERVAL, 5 s) and beyond.
		Buckets:     []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		ConstLabels: labels,
	})
	m.publishedTotal.WithLabelValues(topic) // export zero, so alerts see the series
	reg.MustRegister(m.publishedTotal, m.lag, m.leader, m.delay)
	return m
}

// publishDelay observes, for each event of a batch read readAgo before its
// acknowledgement, how long it waited from its row's creation.
func (m *Metrics) publishDelay(events []Event, readAgo time.Duration) {
	if m == nil {
		return
	}
	for _, e := range events {
		m.delay.Observe((e.Age + readAgo).Seconds())
	}
}

func (m *Metrics) published(topic string, n int) {
	if m != nil {
		m.publishedTotal.WithLabelValues(topic).Add(float64(n))
	}
}

func (m *Metrics) setLag(d time.Duration) {
	if m != nil {
		m.lag.Set(d.Seconds())
	}
}

func (m *Metrics) setLeader(on bool) {
	if m == nil {
		return
	}
	if on {
		m.leader.Set(1)
	} else {
		m.leader.Set(0)
		m.lag.Set(0)
	}
}
