package config_test

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"

	"github.com/example/payment-service/internal/config"
	"github.com/example/payment-service/internal/sandboxprovider"
)

// Docker cannot run here, so docker-compose.yml and the Dockerfile are kept
// right by construction and checked by what can be checked: CI validates
// the compose file's schema with `docker-compose config`, and this test
// checks that the environment compose gives the service is exactly made of
// variables the service reads, and that the service accepts it.
func TestComposeEnvironmentIsWhatTheServiceReads(t *testing.T) {
	t.Parallel()
	compose := readCompose(t)
	svc, ok := compose.Services["payment-service"]
	if !ok || svc.Build.Context == "" {
		t.Fatal("docker-compose.yml has no payment-service built from the Dockerfile")
	}

	read := map[string]bool{}
	_, err := config.Load(func(name string) string {
		read[name] = true
		return svc.Environment[name]
	})
	if err != nil {
		t.Fatalf("the service refuses compose's environment: %v", err)
	}
	var unknown []string
	for name := range svc.Environment {
		if !read[name] {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	if len(unknown) > 0 {
		t.Fatalf("compose sets variables the service never reads: %v", unknown)
	}
	if !strings.Contains(svc.Environment["API_KEYS"], "demo-client:demo-secret") {
		t.Error("compose must use the documented demo key demo-client:demo-secret")
	}

	// Every image is pinned to a version, never latest (Prometheus tags
	// its versions with a leading v).
	pinned := regexp.MustCompile(`^[a-z0-9./_-]+:v?[0-9][A-Za-z0-9._-]*$`)
	for name, s := range compose.Services {
		if s.Image != "" && !pinned.MatchString(s.Image) {
			t.Errorf("service %s: image %q is not pinned to a version", name, s.Image)
		}
	}

	// CI's real-broker tests (scripts/kafka-local.sh) run the Kafka version
	// that compose deploys.
	script, err := os.ReadFile("../../scripts/kafka-local.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^KAFKA_VERSION="\$\{KAFKA_VERSION:-([0-9.]+)\}"`).FindSubmatch(script)
	if m == nil {
		t.Fatal("scripts/kafka-local.sh: no KAFKA_VERSION default found")
	}
	for _, name := range []string{"kafka", "kafka-init"} {
		if want := "apache/kafka:" + string(m[1]); compose.Services[name].Image != want {
			t.Errorf("service %s runs %q, but CI tests against %s", name, compose.Services[name].Image, want)
		}
	}

	// The service charges through the compose sandbox provider, which is
	// healthy before it starts; the provider accepts its environment.
	provider, ok := compose.Services["sandbox-provider"]
	if !ok {
		t.Fatal("docker-compose.yml has no sandbox-provider service")
	}
	if u := svc.Environment["SANDBOX_PROVIDER_URL"]; u != "http://sandbox-provider"+provider.Environment["SANDBOX_ADDR"] {
		t.Errorf("SANDBOX_PROVIDER_URL %q does not point at the sandbox-provider service on its SANDBOX_ADDR %q", u, provider.Environment["SANDBOX_ADDR"])
	}
	if svc.DependsOn["sandbox-provider"].Condition != "service_healthy" {
		t.Error("payment-service must wait for a healthy sandbox-provider")
	}
	providerCfg, err := sandboxprovider.ConfigFromEnv(func(k string) string { return provider.Environment[k] })
	if err != nil {
		t.Errorf("the sandbox provider refuses compose's environment: %v", err)
	}
	// It sends its webhooks to the service's endpoint, on the service's
	// HTTP_ADDR, signed with a secret the service verifies with.
	if u, want := providerCfg.Webhooks.URL, "http://payment-service"+svc.Environment["HTTP_ADDR"]+"/webhooks/sandbox"; u != want {
		t.Errorf("SANDBOX_WEBHOOK_URL %q, want %q", u, want)
	}
	if cfg, err := config.Load(func(k string) string { return svc.Environment[k] }); err == nil {
		held := false
		for _, s := range cfg.Webhooks.Secrets {
			held = held || string(s.Bytes()) == providerCfg.Webhooks.Secret
		}
		if !held {
			t.Error("the service's WEBHOOK_SECRETS do not hold the provider's SANDBOX_WEBHOOK_SECRET: every delivery would be refused")
		}
	}

	// Each built service's compose healthcheck runs the entrypoint binary
	// of the Dockerfile stage it is built from.
	dockerfile, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"payment-service", "sandbox-provider"} {
		s := compose.Services[name]
		stage := dockerfileStage(string(dockerfile), s.Build.Target)
		if stage == "" {
			t.Errorf("%s: the Dockerfile has no stage %q", name, s.Build.Target)
			continue
		}
		if len(s.Healthcheck.Test) < 2 || !strings.Contains(stage, `ENTRYPOINT ["`+s.Healthcheck.Test[1]+`"]`) {
			t.Errorf("%s: healthcheck %v does not run its stage's entrypoint binary", name, s.Healthcheck.Test)
		}
	}
}

// composeFile is what the tests read of docker-compose.yml.
type composeFile struct {
	Services map[string]struct {
		Image string `yaml:"image"`
		Build struct {
			Context string `yaml:"context"`
			Target  string `yaml:"target"`
		} `yaml:"build"`
		Command     []string          `yaml:"command"`
		Restart     string            `yaml:"restart"`
		Environment map[string]string `yaml:"environment"`
		DependsOn   map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
		Healthcheck struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	raw, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose composeFile
	if err := yaml.Unmarshal(raw, &compose); err != nil {
		t.Fatal(err)
	}
	return compose
}

// The tour (docs/tour.md) charges order 1001 first. `make dev` writes the tour's
// orders into its database; compose has a one-shot service that publishes
// them as order events (payment-demo -seed-orders, internal/demoorders),
// run once, after the broker is healthy and kafka-init made the topics, on
// the network and listener the service's consumer uses, to the topic it
// reads.
func TestComposeSeedsTheToursOrders(t *testing.T) {
	t.Parallel()
	compose := readCompose(t)
	seed, ok := compose.Services["seed-orders"]
	if !ok {
		t.Fatal("docker-compose.yml has no seed-orders service: the tour's first charge (docs/tour.md) is 422 order-not-found on compose")
	}
	dockerfile, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	stage := dockerfileStage(string(dockerfile), seed.Build.Target)
	if seed.Build.Context != "." || !strings.Contains(stage, `ENTRYPOINT ["/usr/local/bin/payment-demo"]`) {
		t.Errorf("seed-orders must run payment-demo, built from the Dockerfile (target %q)", seed.Build.Target)
	}
	if len(seed.Command) != 1 || seed.Command[0] != "-seed-orders" {
		t.Errorf("seed-orders runs %v, want [-seed-orders]", seed.Command)
	}
	if seed.Restart != "no" {
		t.Errorf("seed-orders restart %q, want \"no\": it runs once", seed.Restart)
	}
	if seed.DependsOn["kafka"].Condition != "service_healthy" || seed.DependsOn["kafka-init"].Condition != "service_completed_successfully" {
		t.Errorf("seed-orders must wait for a healthy kafka and a completed kafka-init; depends_on %+v", seed.DependsOn)
	}
	svc := compose.Services["payment-service"]
	if seed.Environment["KAFKA_BROKERS"] == "" || seed.Environment["KAFKA_BROKERS"] != svc.Environment["KAFKA_BROKERS"] {
		t.Errorf("seed-orders publishes to %q, the service consumes from %q", seed.Environment["KAFKA_BROKERS"], svc.Environment["KAFKA_BROKERS"])
	}
	cfg, err := config.Load(func(name string) string { return svc.Environment[name] })
	if err != nil {
		t.Fatal(err)
	}
	// payment-demo publishes to order.events (cmd/payment-demo's
	// orderEventsTopic); the service must read it, and kafka-init make it.
	if cfg.OrderConsumer.Topic != "order.events" {
		t.Errorf("the service reads %q, seed-orders publishes to order.events", cfg.OrderConsumer.Topic)
	}
	if init := strings.Join(compose.Services["kafka-init"].Command, " "); !strings.Contains(init, "order.events:") {
		t.Errorf("kafka-init does not create order.events: %s", init)
	}
}

// kafka-init creates every topic the service reads or writes with
// compose's environment (the broker creates none by itself:
// KAFKA_AUTO_CREATE_TOPICS_ENABLE is false), and the saga's client has a
// key, so the tour can read the payment of a saga step.
func TestComposeCreatesTheServicesTopicsAndKeysTheSaga(t *testing.T) {
	t.Parallel()
	compose := readCompose(t)
	svc := compose.Services["payment-service"]
	cfg, err := config.Load(func(name string) string { return svc.Environment[name] })
	if err != nil {
		t.Fatal(err)
	}
	init := strings.Join(compose.Services["kafka-init"].Command, " ")
	m := regexp.MustCompile(`for spec in ([^;]*);`).FindStringSubmatch(init)
	if m == nil {
		t.Fatalf("kafka-init has no `for spec in ...;` list of topics: %s", init)
	}
	made := map[string]bool{}
	for _, spec := range strings.Fields(m[1]) {
		name, partitions, ok := strings.Cut(spec, ":")
		if !ok || partitions == "" {
			t.Errorf("kafka-init: %q is not topic:partitions", spec)
		}
		made[name] = true
	}
	for _, topic := range []string{cfg.OrderConsumer.Topic, cfg.OrderConsumer.DLTTopic, cfg.PaymentEventsTopic,
		cfg.Saga.CommandsTopic, cfg.Saga.CommandsDLTTopic, cfg.Saga.RepliesTopic} {
		if !made[topic] {
			t.Errorf("the service uses topic %s, which kafka-init does not create", topic)
		}
	}
	keyed := false
	for _, k := range cfg.APIKeys {
		keyed = keyed || k.ClientID == cfg.Saga.ClientID
	}
	if !keyed {
		t.Errorf("the saga's client %q has no key in compose's API_KEYS", cfg.Saga.ClientID)
	}
}

// dockerfileStage returns the text of the stage named target ("FROM ... AS
// target" up to the next FROM), or "" if there is none.
func dockerfileStage(dockerfile, target string) string {
	m := regexp.MustCompile(`(?ms)^FROM \S+ AS ` + regexp.QuoteMeta(target) + `\n(.*?)(^FROM |\z)`).FindStringSubmatch(dockerfile)
	if m == nil {
		return ""
	}
	return m[1]
}

// A `# syntax=` parser directive makes BuildKit (compose v2's builder) pull
// that frontend image before it builds, so a build with every base image
// present still needs a registry. The Dockerfile uses nothing the built-in
// frontend lacks; it stays without one.
func TestDockerfileNeedsNoFrontendImage(t *testing.T) {
	t.Parallel()
	dockerfile, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	// Parser directives are the `# key=value` comments before the first
	// instruction, blank line or other comment.
	for _, line := range strings.Split(string(dockerfile), "\n") {
		m := regexp.MustCompile(`^#\s*(\w+)\s*=`).FindStringSubmatch(line)
		if m == nil {
			break
		}
		if strings.EqualFold(m[1], "syntax") {
			t.Fatalf("Dockerfile: %q makes BuildKit fetch a frontend image before it builds", line)
		}
	}
}
