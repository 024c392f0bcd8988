// Package deploy_test checks what deploy/ holds against the tools and the
// service it is for: Prometheus's own packages validate the scrape config
// and the alert rules as promtool does, the dashboard's queries are parsed by Prometheus's
// PromQL parser, docker-compose.yml is checked to wire them together, and
// every series a panel or an alert selects must be exposed by a running
// service after traffic, so the dashboard and the alerts cannot drift from
// the code.
package deploy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v4"

	"github.com/example/payment-service/internal/config"
	"github.com/example/payment-service/internal/kafka/idempotent"
	"github.com/example/payment-service/internal/kafkatest"
	"github.com/example/payment-service/internal/servicetest"
	"github.com/example/payment-service/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

const (
	prometheusConfig = "prometheus/prometheus.yml"
	alertRules       = "prometheus/alerts.yml"
	dashboardFile    = "grafana/dashboards/payment-service.json"
	datasourceFile   = "grafana/provisioning/datasources/prometheus.yml"
	dashboardsFile   = "grafana/provisioning/dashboards/payment-service.yml"
)

// Prometheus accepts deploy/'s config and the alert rules it loads, checked
// as promtool checks them (checkPrometheusConfig), and the rules on their
// own as `promtool check rules` does.
func TestPrometheusAcceptsTheConfigAndTheRules(t *testing.T) {
	t.Parallel()
	if errs := checkPrometheusConfig(prometheusConfig); errs != nil {
		t.Errorf("%s (with the rules it loads): %v", prometheusConfig, errors.Join(errs...))
	}
	if errs := checkRuleFile(alertRules); errs != nil {
		t.Errorf("%v", errors.Join(errs...)) // each error names the file
	}
}

// The checks are not vacuous: deploy/'s own config and rules, each broken
// in one way, are refused, through the config (which loads the rules) as
// well as through the rule file alone.
func TestPrometheusChecksRefuseABrokenConfigOrRule(t *testing.T) {
	t.Parallel()
	realConfig, err := os.ReadFile(prometheusConfig)
	if err != nil {
		t.Fatal(err)
	}
	realRules, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	// Each case breaks one file: the first old in it becomes new.
	for _, tc := range []struct {
		name     string
		inConfig bool // else in the rules
		old, new string
		want     string // in the error
	}{
		{"a rule's PromQL does not parse", false, "expr: max by (topic) (outbox_relay_lag_seconds) > 60",
			"expr: max by (topic) (outbox_relay_lag_seconds > 60", "unclosed left parenthesis"},
		{"a rule's field is misspelt", false, "        for: 5m", "        fore: 5m", "field fore not found"},
		{"a rule's for is no duration", false, "        for: 5m", "        for: five minutes", "five minutes"},
		{"an annotation's template does not parse", false, "{{ $labels.topic }}", "{{ $labels.topic ", "annotation"},
		{"a rule has no name", false, "alert: OutboxBacklogGrowing", `alert: ""`, "one of 'record' or 'alert' must be set"},
		{"the config names a rule file that is not there", true, "  - alerts.yml", "  - alert.yml", "does not point to an existing file"},
		{"the config's scrape interval is no duration", true, "scrape_interval: 5s", "scrape_interval: often", "often"},
		{"the config has an unknown field", true, "    metrics_path: /metrics", "    metric_path: /metrics", "field metric_path not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, rules := string(realConfig), string(realRules)
			broken := &rules
			if tc.inConfig {
				broken = &cfg
			}
			if !strings.Contains(*broken, tc.old) {
				t.Fatalf("nothing to break: no %q (the case would prove nothing)", tc.old)
			}
			*broken = strings.Replace(*broken, tc.old, tc.new, 1)
			dir := t.TempDir()
			cfgFile, rulesFile := path.Join(dir, "prometheus.yml"), path.Join(dir, "alerts.yml")
			for file, content := range map[string]string{cfgFile: cfg, rulesFile: rules} {
				if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			refused := func(what string, errs []error) {
				t.Helper()
				if err := errors.Join(errs...); err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s: want an error with %q, got %v", what, tc.want, err)
				}
			}
			refused("the config", checkPrometheusConfig(cfgFile))
			if !tc.inConfig {
				refused("the rule file", checkRuleFile(rulesFile))
			}
		})
	}
}

// alertRule is one rule of alerts.yml, with the comment above it.
type alertRule struct {
	name, expr, reason string
}

func readAlertRules(t *testing.T) []alertRule {
	t.Helper()
	raw, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var rules []alertRule
	groups := mapValue(doc.Content[0], "groups")
	for _, g := range groups.Content {
		for _, r := range mapValue(g, "rules").Content {
			rules = append(rules, alertRule{
				name:   mapValue(r, "alert").Value,
				expr:   mapValue(r, "expr").Value,
				reason: strings.TrimSpace(r.HeadComment),
			})
		}
	}
	return rules
}

// mapValue is the value of key in a YAML mapping node.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return &yaml.Node{}
}

// The alerts an operator needs (the list below) are there, each with the
// reason it exists.
func TestEveryAlertSaysWhyItExists(t *testing.T) {
	t.Parallel()
	rules := readAlertRules(t)
	var names []string
	for _, r := range rules {
		names = append(names, r.name)
		if len(r.reason) < 80 {
			t.Errorf("alert %s: the comment above it must say why it exists, got %q", r.name, r.reason)
		}
	}
	for _, want := range []string{"OutboxBacklogGrowing", "OutboxRelayWithoutLeader", "OrderConsumerStuck",
		"OrderEventsDeadLettered", "OrderEventsDeadLetterRefused", "BackgroundComponentFailing",
		"UnknownOutcomesNotResolved", "ChargeCompleterFailing", "RetentionPurgeFailing",
		"ReconciliationMismatchesOpen", "ReconciliationNotRunning"} {
		if !slices.Contains(names, want) {
			t.Errorf("no alert %s (have %v)", want, names)
		}
	}
}

// alertTable is the page that holds the table of what to alert on,
// relative to the repository.
const alertTable = "docs/operations.md"

// alertRow is a row of that table, whose first cell names a rule.
var alertRow = regexp.MustCompile("^\\| `(\\w+)` \\|")

// The table of what to alert on (docs/operations.md) is what operators
// read: it names every rule of alerts.yml, and no rule that is not there.
func TestTheAlertTableNamesEveryAlertRule(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../" + alertTable)
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(raw), "| rule | signal | meaning | fires |")
	if !ok {
		t.Fatalf("%s: no alert table (| rule | signal | meaning | fires |)", alertTable)
	}
	table, _, _ = strings.Cut(table, "\n\n")
	var named []string
	for _, line := range strings.Split(table, "\n") {
		if m := alertRow.FindStringSubmatch(line); m != nil {
			named = append(named, m[1])
		}
	}
	var rules []string
	for _, r := range readAlertRules(t) {
		rules = append(rules, r.name)
	}
	slices.Sort(named)
	slices.Sort(rules)
	if !slices.Equal(named, rules) {
		t.Errorf("%s's alert table names %v; deploy/prometheus/alerts.yml has %v", alertTable, named, rules)
	}
}

// panel is the part of a Grafana panel the checks read.
type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

type dashboard struct {
	UID    string  `json:"uid"`
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// grafanaVars are Grafana's interval variables, replaced by what Grafana
// puts there before the query reaches Prometheus.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "15s", "$__range", "1h")

// queries is every PromQL expression of the dashboard and the alerts, by
// where it comes from.
func queries(t *testing.T) map[string]string {
	t.Helper()
	q := map[string]string{}
	for _, p := range readDashboard(t).Panels {
		for i, target := range p.Targets {
			q[fmt.Sprintf("panel %q query %d", p.Title, i+1)] = grafanaVars.Replace(target.Expr)
		}
	}
	for _, r := range readAlertRules(t) {
		q["alert "+r.name] = r.expr
	}
	return q
}

// selectors parses expr with Prometheus's PromQL parser and returns its
// series selectors.
func selectors(expr string) ([]*parser.VectorSelector, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var out []*parser.VectorSelector
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs)
		}
		return nil
	})
	return out, nil
}

// The dashboard is what the provisioning loads: every panel queries the
// provisioned Prometheus data source with PromQL that parses, and the
// panels fit Grafana's 24-column grid without overlapping.
func TestDashboardIsWellFormed(t *testing.T) {
	t.Parallel()
	d := readDashboard(t)
	var ds struct {
		Datasources []struct {
			UID  string `yaml:"uid"`
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	readYAML(t, datasourceFile, &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" {
		t.Fatalf("%s: want one Prometheus data source, got %+v", datasourceFile, ds.Datasources)
	}
	uid := ds.Datasources[0].UID
	if d.UID == "" || d.Title == "" {
		t.Fatal("the dashboard needs a uid (its URL) and a title")
	}
	ids := map[int]bool{}
	cells := map[[2]int]string{}
	graphs := 0
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d appears twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, p.GridPos)
		}
		for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
			for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
				if other, ok := cells[[2]int{x, y}]; ok {
					t.Fatalf("panels %q and %q overlap at %d,%d", other, p.Title, x, y)
				}
				cells[[2]int{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		graphs++
		if p.Datasource == nil || p.Datasource.UID != uid || len(p.Targets) == 0 {
			t.Errorf("panel %q: must query the provisioned data source %q", p.Title, uid)
		}
	}
	if graphs < 12 {
		t.Errorf("%d graph panels; the issue asks for requests, latency, idempotency, unknown outcomes, provider, consumer, outbox, jobs and the pool", graphs)
	}
	for where, expr := range queries(t) {
		if _, err := selectors(expr); err != nil {
			t.Errorf("%s: %v\n%s", where, err, expr)
		}
	}
}

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	raw, err := os.ReadFile(file) //nolint:gosec // G304: the repository's own deploy files
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// composeService is the part of a compose service these checks read.
type composeService struct {
	Image       string            `yaml:"image"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
}

// docker compose runs the stack these files are for: Prometheus with this
// directory's config and rules, scraping the service where compose runs
// it; Grafana with the provisioning, its dashboards directory where the
// provider looks and its data source at compose's Prometheus; the service
// sending traces to Jaeger's OTLP/HTTP port. Docker cannot run here, so the
// wiring is checked by reading the files (CI validates the compose schema).
func TestComposeWiresTheObservabilityStack(t *testing.T) {
	t.Parallel()
	var compose struct {
		Services map[string]composeService `yaml:"services"`
	}
	readYAML(t, "../docker-compose.yml", &compose)
	svc := func(name string) composeService {
		s, ok := compose.Services[name]
		if !ok {
			t.Fatalf("docker-compose.yml has no %s service", name)
		}
		return s
	}
	mounted := func(s composeService, source string) string {
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 && path.Clean(parts[0]) == path.Clean(source) {
				return parts[1]
			}
		}
		t.Fatalf("%s is not mounted (volumes %v)", source, s.Volumes)
		return ""
	}

	// Prometheus reads this directory as /etc/prometheus, the image's
	// default config file included, and scrapes the service's HTTP port.
	prom := svc("prometheus")
	if got := mounted(prom, "./deploy/prometheus"); got != "/etc/prometheus" {
		t.Errorf("deploy/prometheus is mounted at %s, want /etc/prometheus", got)
	}
	var promCfg struct {
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, prometheusConfig, &promCfg)
	cfg, err := config.Load(func(k string) string { return svc("payment-service").Environment[k] })
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(cfg.HTTPAddr, ":")
	if len(promCfg.ScrapeConfigs) != 1 || len(promCfg.ScrapeConfigs[0].StaticConfigs) != 1 ||
		!slices.Equal(promCfg.ScrapeConfigs[0].StaticConfigs[0].Targets, []string{"payment-service:" + port}) {
		t.Errorf("the scrape config does not target payment-service:%s: %+v", port, promCfg.ScrapeConfigs)
	}

	// Grafana: provisioning, the dashboards where the provider looks, the
	// data source at compose's Prometheus, the home dashboard a real file.
	graf := svc("grafana")
	if got := mounted(graf, "./deploy/grafana/provisioning"); got != "/etc/grafana/provisioning" {
		t.Errorf("provisioning mounted at %s, want /etc/grafana/provisioning", got)
	}
	var provider struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, dashboardsFile, &provider)
	dashDir := mounted(graf, "./deploy/grafana/dashboards")
	if len(provider.Providers) != 1 || provider.Providers[0].Options.Path != dashDir {
		t.Errorf("the dashboard provider reads %+v, compose mounts the dashboards at %s", provider.Providers, dashDir)
	}
	if home := graf.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != dashDir+"/"+path.Base(dashboardFile) {
		t.Errorf("home dashboard %q is not %s in %s", home, path.Base(dashboardFile), dashDir)
	}
	var ds struct {
		Datasources []struct {
			URL string `yaml:"url"`
		} `yaml:"datasources"`
	}
	readYAML(t, datasourceFile, &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].URL != "http://prometheus:9090" || !slices.Contains(prom.Ports, "127.0.0.1:9090:9090") {
		t.Errorf("data source %+v, Prometheus ports %v", ds.Datasources, prom.Ports)
	}

	// Traces go to Jaeger's OTLP/HTTP receiver, and its UI is published.
	jaeger := svc("jaeger")
	if cfg.Tracing.Endpoint != "http://jaeger:4318/v1/traces" {
		t.Errorf("the service exports traces to %q, want Jaeger's OTLP/HTTP port", cfg.Tracing.Endpoint)
	}
	if !slices.Contains(jaeger.Ports, "127.0.0.1:16686:16686") {
		t.Errorf("Jaeger's UI is not published on 16686: %v", jaeger.Ports)
	}
	for _, name := range []string{"jaeger", "prometheus", "grafana"} {
		if !regexp.MustCompile(`:v?[0-9]`).MatchString(svc(name).Image) {
			t.Errorf("%s: image %q is not pinned", name, svc(name).Image)
		}
	}
}

// Every series a dashboard panel or an alert selects is exposed by a
// running service after traffic that touches every part: charges (approved,
// declined, not charged, outcome unknown), a replay, a reused key, an
// in-progress answer, an order event and a poison one, the outbox relay,
// both jobs. A selector's label matchers must match too, so a wrong label
// value (job="completer") fails as surely as a wrong name.
func TestEveryMetricTheDashboardAndAlertsUseIsExposed(t *testing.T) {
	t.Parallel()
	wanted := map[string][]string{} // selector -> where it is used
	sels := map[string]*parser.VectorSelector{}
	for where, expr := range queries(t) {
		vs, err := selectors(expr)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		for _, v := range vs {
			wanted[v.String()] = append(wanted[v.String()], where)
			sels[v.String()] = v
		}
	}

	s := startService(t)
	s.traffic(t)

	var missing []string
	deadline := time.Now().Add(90 * time.Second)
	for {
		exposed := s.scrape(t)
		missing = missing[:0]
		for key, vs := range sels {
			if !exposed.match(vs.LabelMatchers) {
				missing = append(missing, key)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("%s is not exposed by the service; used by %v", m, wanted[m])
	}
}

// runningService is the real service over a fresh database, with Kafka
// (the in-process broker unless KAFKA_BROKERS names one) and a sandbox
// provider, and the jobs firing every second.
type runningService struct {
	url     string
	db      *pgxpool.Pool
	brokers []string
	orders  string
}

func startService(t *testing.T) *runningService {
	t.Helper()
	brokers := kafkatest.Brokers(t)
	orders := kafkatest.CreateTopic(t, brokers, 1)
	session := "1s"
	if len(kafkatest.ExternalBrokers()) > 0 {
		session = "6s"
	}
	s := servicetest.Start(t, servicetest.Options{DSN: testdb.New(t), Env: map[string]string{
		"KAFKA_BROKERS":                     strings.Join(brokers, ","),
		"PAYMENT_EVENTS_TOPIC":              kafkatest.CreateTopic(t, brokers, 1),
		"ORDER_EVENTS_TOPIC":                orders,
		"ORDER_EVENTS_DLT_TOPIC":            kafkatest.CreateTopic(t, brokers, 1),
		"ORDER_CONSUMER_GROUP":              "order-projection-" + uuid.NewString(),
		"KAFKA_CONSUMER_MAX_WAIT":           "100ms",
		"KAFKA_CONSUMER_HEARTBEAT_INTERVAL": "100ms",
		"KAFKA_CONSUMER_SESSION_TIMEOUT":    session,
		"IDEMPOTENCY_CLEANUP_CRON":          "* * * * * *",
		"CHARGE_COMPLETER_CRON":             "* * * * * *",
		// Reconciliation every second, finding the lost answer below
		// (drop_1) at once: its item's class and amount are exposed.
		"RECONCILE_CRON":           "* * * * * *",
		"RECONCILE_WINDOW":         "1h",
		"RECONCILE_SETTLEMENT_LAG": "0s",
	}})
	return &runningService{url: s.URL, db: s.DB, brokers: brokers, orders: orders}
}

func (s *runningService) traffic(t *testing.T) {
	t.Helper()
	for id := 1001; id <= 1005; id++ {
		if _, err := s.db.Exec(context.Background(),
			`INSERT INTO order_projection (order_id, customer_id, amount, currency) VALUES ($1, 42, 10.00, 'RUB')`, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		key      string
		order    int
		external string
		want     int
	}{
		{"k-approved", 1001, "pi_1", http.StatusCreated},
		{"k-approved", 1001, "pi_1", http.StatusCreated},                  // a replay
		{"k-approved", 1002, "pi_2", http.StatusConflict},                 // the key reused
		{"k-declined", 1002, "decline_1", http.StatusPaymentRequired},     // declined
		{"k-refused", 1003, "fail_1", http.StatusServiceUnavailable},      // not charged
		{"k-lost", 1004, "drop_1", http.StatusServiceUnavailable},         // outcome unknown
		{"k-second-try", 1004, "pi_4b", http.StatusConflict},              // in progress: 1004's payment is PENDING
		{"k-get", 1005, "pi_5", http.StatusCreated},                       // one more event for the relay
		{"k-unknown-order", 9999, "pi_9", http.StatusUnprocessableEntity}, // 422
	} {
		body := `{"orderId":` + strconv.Itoa(c.order) + `,"customerId":42,"amount":"10.00","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"` + c.external + `"}`
		req, _ := http.NewRequest(http.MethodPost, s.url+"/payments", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer demo-secret")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", c.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Fatalf("%s: %d %s, want %d", c.key, resp.StatusCode, b, c.want)
		}
	}
	// An order event, and one the consumer can never apply.
	p, err := idempotent.New(idempotent.Config{Brokers: s.brokers, Topic: s.orders})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	good := `{"eventId":"` + uuid.Must(uuid.NewV7()).String() + `","eventType":"OrderCreated.v1","orderId":2001,"customerId":42,` +
		`"amount":"10.00","currency":"RUB","occurredAt":"2026-11-29T10:00:00Z"}`
	if err := p.Publish(ctx,
		idempotent.Message{Key: []byte("2001"), Value: []byte(good)},
		idempotent.Message{Key: []byte("2002"), Value: []byte(`not json`)},
	); err != nil {
		t.Fatal(err)
	}
}

// series is what /metrics exposes: every sample's labels, __name__ included.
type series []labels.Labels

func (s *runningService) scrape(t *testing.T) series {
	t.Helper()
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out series
	for name, f := range families {
		for _, m := range f.GetMetric() {
			base := map[string]string{}
			for _, l := range m.GetLabel() {
				base[l.GetName()] = l.GetValue()
			}
			add := func(name string, extra ...string) {
				b := labels.NewBuilder(labels.FromMap(base))
				b.Set(model.MetricNameLabel, name)
				for i := 0; i+1 < len(extra); i += 2 {
					b.Set(extra[i], extra[i+1])
				}
				out = append(out, b.Labels())
			}
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				for _, bucket := range m.GetHistogram().GetBucket() {
					add(name+"_bucket", "le", strconv.FormatFloat(bucket.GetUpperBound(), 'g', -1, 64))
				}
				add(name+"_bucket", "le", "+Inf")
				add(name + "_sum")
				add(name + "_count")
			case dto.MetricType_SUMMARY:
				add(name + "_sum")
				add(name + "_count")
			default:
				add(name)
			}
		}
	}
	return out
}

// match reports whether some exposed series satisfies every matcher.
func (s series) match(matchers []*labels.Matcher) bool {
	for _, ls := range s {
		ok := true
		for _, m := range matchers {
			if !m.Matches(ls.Get(m.Name)) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}
