package config_test

import (
	"testing"

	"github.com/example/payment-service/internal/config"
)

func TestTracingIsOnOnlyWithAnOTLPEndpoint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // the traces endpoint; "" is off
	}{
		{"nothing set", nil, ""},
		{"base endpoint gets the traces path", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318"}, "http://jaeger:4318/v1/traces"},
		{"base endpoint with a slash", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}, "http://collector:4318/v1/traces"},
		{"traces endpoint is taken as it is", map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT":        "http://ignored:4318",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://otel.example:443/custom/traces",
		}, "https://otel.example:443/custom/traces"},
		{"the SDK disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318", "OTEL_SDK_DISABLED": "TRUE"}, ""},
		{"no traces exporter", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318", "OTEL_TRACES_EXPORTER": "none"}, ""},
		{"explicit defaults", map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318",
			"OTEL_TRACES_EXPORTER":        "otlp",
			"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
			"OTEL_SDK_DISABLED":           "false",
		}, "http://jaeger:4318/v1/traces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.Load(env(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Tracing.Endpoint != tc.want || cfg.Tracing.Enabled() != (tc.want != "") {
				t.Fatalf("tracing = %+v, want endpoint %q", cfg.Tracing, tc.want)
			}
			if cfg.Tracing.ServiceName != "payment-service" {
				t.Fatalf("service name %q, want the default payment-service", cfg.Tracing.ServiceName)
			}
		})
	}
}

func TestTracingServiceName(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(env(map[string]string{"OTEL_SERVICE_NAME": "payments-eu"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tracing.ServiceName != "payments-eu" {
		t.Fatalf("service name %q", cfg.Tracing.ServiceName)
	}
}

func TestTracingRejectsBadValuesNamingTheVariable(t *testing.T) {
	t.Parallel()
	wantRejected(t, []rejection{
		{"endpoint without scheme", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "jaeger:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{"traces endpoint not http", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "grpc://jaeger:4317"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
		{"gRPC protocol", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{"traces protocol json", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		{"unknown exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"},
		{"bad disabled flag", map[string]string{"OTEL_SDK_DISABLED": "yes"}, "OTEL_SDK_DISABLED"},
	})
}
