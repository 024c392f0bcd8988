package config

import (
	"strings"
)

// otlpExample is the endpoint an error message about an OTLP URL shows.
const otlpExample = "http://localhost:4318"

// Tracing is the OpenTelemetry tracing configuration, from the standard
// OTEL_* variables (opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables).
//
// Two kinds of variable, read in two places:
//
//   - The ones that decide whether the service traces and where to: read
//     here, through getenv like every other variable, so a wrong value stops
//     the start with a message naming it, and tests can set them in a map.
//     OTEL_SDK_DISABLED, OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_ENDPOINT,
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL,
//     OTEL_EXPORTER_OTLP_TRACES_PROTOCOL and OTEL_SERVICE_NAME.
//   - The exporter's and the SDK's tuning (OTEL_EXPORTER_OTLP_HEADERS,
//     _TIMEOUT, _COMPRESSION, _CERTIFICATE, OTEL_BSP_*, OTEL_TRACES_SAMPLER
//     and _ARG, OTEL_RESOURCE_ATTRIBUTES): read by the OpenTelemetry SDK
//     itself from the process environment, when tracing is on. Its parsing
//     is the specification's reference; a copy here would drift from it.
type Tracing struct {
	// Endpoint is the OTLP/HTTP URL that spans are sent to, such as
	// http://jaeger:4318/v1/traces. Empty: tracing is off, and the service
	// builds no SDK, no exporter and no span processor at all.
	Endpoint string
	// ServiceName (OTEL_SERVICE_NAME, default payment-service) is the
	// service.name resource attribute.
	ServiceName string
}

// Enabled reports whether spans are exported.
func (t Tracing) Enabled() bool { return t.Endpoint != "" }

// tracing reads the variables that switch tracing on and point it.
func (p *parser) tracing() Tracing {
	t := Tracing{ServiceName: p.str("OTEL_SERVICE_NAME", "payment-service", false)}

	// OTEL_SDK_DISABLED: the specification's booleans are false unless the
	// value is "true", case-insensitively; anything else is worth a message.
	switch v := strings.ToLower(p.str("OTEL_SDK_DISABLED", "false", false)); v {
	case "true":
		return t
	case "false":
	default:
		p.fail("OTEL_SDK_DISABLED", "must be true or false, got %q", v)
	}
	switch v := p.str("OTEL_TRACES_EXPORTER", "otlp", false); v {
	case "none":
		return t
	case "otlp":
	default:
		p.fail("OTEL_TRACES_EXPORTER", "must be otlp or none, got %q", v)
		return t
	}

	// Only OTLP over HTTP with protobuf, the specification's default: the
	// gRPC exporter would add a second transport for no gain here (every
	// OTLP receiver, the compose Jaeger included, takes both).
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := p.str(name, "", false); v != "" && v != "http/protobuf" {
			p.fail(name, "only http/protobuf is supported (the receiver's OTLP/HTTP port, usually 4318), got %q", v)
		}
	}

	// The signal-specific variable is the URL as it is; the general one is
	// a base URL that the traces path is appended to.
	if v := p.str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "", false); v != "" {
		t.Endpoint = p.checkHTTPURL("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", v, otlpExample)
		return t
	}
	if v := p.str("OTEL_EXPORTER_OTLP_ENDPOINT", "", false); v != "" {
		if base := p.checkHTTPURL("OTEL_EXPORTER_OTLP_ENDPOINT", v, otlpExample); base != "" {
			t.Endpoint = strings.TrimSuffix(base, "/") + "/v1/traces"
		}
	}
	return t
}
