package service

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/example/payment-service/internal/consumer"
	httpapi "github.com/example/payment-service/internal/http"
	"github.com/example/payment-service/internal/outbox"
)

// backgroundComponents lists the components that run beside the API (those
// configured) for /health, and exports each one's health as
// payment_component_healthy{component}: 1 while it works, 0 while it fails.
//
// They are deliberately not part of readiness (/readyz checks the database
// only): the payment API does not need the order consumer or the relay to
// charge, and taking a replica out of rotation because Kafka is unwell
// would stop payments for no reason. Operators alert on the gauge instead
// (docs/operations.md, "Health and what to alert on").
func backgroundComponents(reg prometheus.Registerer, c *consumer.Consumer, saga *consumer.SagaConsumer, r *outbox.Relay) []httpapi.Component {
	var out []httpapi.Component
	if c != nil {
		out = append(out, httpapi.Component{Name: "order-consumer", Health: c.Health})
	}
	if saga != nil {
		out = append(out, httpapi.Component{Name: "saga-consumer", Health: saga.Health})
	}
	if r != nil {
		out = append(out, httpapi.Component{Name: "outbox-relay", Health: r.Health})
	}
	for _, comp := range out {
		health := comp.Health
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "payment_component_healthy",
			Help:        "1 while the background component works, 0 while it fails (its error is on /health and in the log). Not part of /readyz.",
			ConstLabels: prometheus.Labels{"component": comp.Name},
		}, func() float64 {
			if health() != nil {
				return 0
			}
			return 1
		}))
	}
	return out
}
