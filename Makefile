# The two commands a newcomer needs: `make dev` and `make test`.
GO          ?= go
# go vet's analyzers, staticcheck (v0.8.2 inside), errcheck, errorlint,
# rowserrcheck and gosec, configured in .golangci.yml.
GOLANGCI_LINT ?= github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0
BIN         ?= bin

.PHONY: dev demo path-files compose-check fresh-machine-check test test-pgbench test-stripe-mock test-kafka test-fault test-failover test-fault-long test-fault-rolling-long fuzz contract-fuzz lint build migrate bench bench-api bench-scale bench-tracing docs-screenshot help model model-mutants model-deep \
	model-mutant-nofence model-mutant-findsave model-mutant-delunknown model-mutant-noorderidx model-mutant-nolease \
	model-mutant-nolookup model-mutant-busyasnone model-mutant-nosettle model-mutant-nowait \
	model-mutant-hooknofence model-mutant-hookfinal model-mutant-hooknodedup \
	model-mutant-unboundguess model-mutant-notifyguess \
	model-mutant-refund-checkthenact model-mutant-refund-newkey model-mutant-refund-nofence \
	model-mutant-refund-nocommand model-mutant-refund-delunknown model-mutant-refund-nolease \
	model-mutant-refund-nowait model-mutant-saga-notombstone model-mutant-saga-nowait model-mutant-twostep-noindex model-mutant-twostep-statefirst

help:
	@echo "make dev      run the service on a throwaway PostgreSQL (no Docker), http://127.0.0.1:8080; PAYMENT_PROVIDER=stripe charges through the Stripe fake instead of the sandbox"
	@echo "make demo     publish an order event, charge it twice and with a changed body, refund part of it (and replay, over-refund, list), show rows and events; authorize an order, capture part, refund part of the capture, authorize another and void it; then a saga step by command: charge, compensate, re-send, each reply (needs make dev or compose)"
	@echo "make compose-check  docker-compose.yml and the Dockerfile run for real: health, make demo, a refund, traces, metrics, a saga step's reply (docs/compose-check.md)"
	@echo "make test     run every test with -race against real PostgreSQL (and a Kafka-protocol broker)"
	@echo "make fresh-machine-check  make dev and make test on a fresh Debian root (debootstrap, chroot): nothing installed by hand"
	@echo "make test-kafka  run the Kafka tests again against a real Apache Kafka broker (scripts/kafka-local.sh)"
	@echo "make test-pgbench  the pgbench ceiling's scripts run on the schema (needs Debian's postgresql for pgbench; CI runs it)"
	@echo "make test-stripe-mock  the Stripe adapter's requests against stripe-mock, started on loopback and stopped by its pid (CI runs it)"
	@echo "make test-fault  the fault suite (test/fault): replicas, kill -9, lossy links, database and broker outages, seeded rounds"
	@echo "make test-failover  the failover suite: charges and refunds through HAProxy while Patroni's primary dies or is switched over (scripts/pg-ha-local.sh)"
	@echo "make test-fault-long  10,000 seeded fault rounds (about an hour; FAULT_FLAGS=\"-seed N\" to pick the seed)"
	@echo "make test-fault-rolling-long  the rolling deploy (previous release beside this one) with 150 seeded rounds per rolled replica"
	@echo "make fuzz     each fuzz target for FUZZTIME (default 20s); the corpus is in testdata/fuzz"
	@echo "make contract-fuzz  Schemathesis against the real service on a throwaway database, every check, seeded (CONTRACT_FUZZ_SEED)"
	@echo "make lint     gofmt; golangci-lint: go vet, staticcheck, errcheck, errorlint, rowserrcheck, gosec (.golangci.yml); the dependency rule (docs/architecture.md)"
	@echo "make build    static binaries in $(BIN)/: payment-service, sandbox-provider"
	@echo "make migrate  apply migrations to DATABASE_URL"
	@echo "make bench    the benchmarks reported in docs/benchmarks.md"
	@echo "make bench-api  POST /payments against pgbench with the same statements; table, docs/bench-api.json and .png"
	@echo "make bench-scale  cost as the tables grow: empty against 1M and 3M rows per table, the purge under load paced and not; docs/bench-scale.json and .png (about an hour)"
	@echo "make bench-tracing  what tracing costs POST /payments: off (the default) and on"
	@echo "make docs-screenshot  redraw docs/api-docs.png with the browser test of /docs (needs chromium)"
	@echo "make path-files  the files of the service a charge, a refund, a capture, an order event and a saga step run, measured by coverage (README's table)"
	@echo "make model    model-check the idempotency protocol of charges, refunds, saga steps and two-step payments with spin (docs/model.md)"
	@echo "make model-mutants  check that every mutant of the model yields its counterexample"

# Built, then exec'd: Ctrl-C reaches payment-dev itself, which stops the
# service, the broker and PostgreSQL and removes their data.
dev:
	@$(GO) build -o $(BIN)/payment-dev ./cmd/payment-dev
	@exec $(BIN)/payment-dev

demo:
	$(GO) run ./cmd/payment-demo

# docker compose up, proven (docs/compose-check.md): the unchanged
# Dockerfile and docker-compose.yml on a Docker daemon of the check's own,
# host networking only, stand-in base images built from Debian's packages;
# then the health checks, make demo, an order event, a refund, a trace,
# Prometheus's scrape, and a ChargeOrder.v1 answered on payment.replies.
# Needs root, docker.io, docker-compose, debootstrap.
compose-check:
	deploy/compose-check/check.sh

# First the Debian packages that Go cannot bring (chromium for the browser
# test, gcc for -race): as root they are installed when missing; a normal
# user without them is told the one apt line before any test runs
# (scripts/install-test-packages.sh, shared with .ci/run). PostgreSQL needs
# no package: it is downloaded (docs/decisions/0023), and unpacked before
# the tests, outside -race; deploy/'s Prometheus files are checked with
# Prometheus's Go packages, so no promtool is needed either.
test:
	@scripts/install-test-packages.sh
	@$(GO) run ./internal/pgtemp/cmd/pgtemp-binaries >/dev/null
	$(GO) test -race -count=1 -timeout 20m ./...

# The pgbench ceiling's scripts (make bench-api) run on the migrated
# schema and do a charge's work. Apart from make test because pgbench comes
# from Debian's postgresql package, which make test does not need; CI runs
# it on its host, where that package is installed.
test-pgbench:
	$(GO) test -race -count=1 -tags pgbench -run TestPgbenchScriptsRunOnTheSchema ./cmd/bench-api

# The Stripe adapter's every request against stripe-mock (Stripe's mock of
# its API, the go.mod tool dependency), which scripts/stripe-mock.sh starts
# on loopback (HTTP and HTTPS on 127.0.0.1) and stops by its pid whatever
# the test's result, Ctrl-C included; the test reads its address from
# STRIPE_MOCK_URL. make test runs the same test on a stripe-mock it starts
# itself.
test-stripe-mock:
	@trap 'GO=$(GO) scripts/stripe-mock.sh stop' EXIT INT TERM; \
	out=$$(GO=$(GO) scripts/stripe-mock.sh start) || { echo "test-stripe-mock: could not start stripe-mock" >&2; exit 1; }; \
	export "$$out"; echo "$$out"; \
	$(GO) test -race -count=1 -v -run 'TestStripeMockTakesEveryRequestTheAdapterSends' ./internal/provider/stripe/

# The README's two commands on a fresh Debian root (debootstrap, chroot):
# make dev as a normal user serves the tour's first charge and stops on
# Ctrl-C; make test passes as root. Needs root, debootstrap, mvn. CI runs
# it as its make test (docs/decisions/0026-fresh-machine-check-in-ci.md);
# FRESH_MACHINE_COLD=1 empties its cache first, for a cold run.
fresh-machine-check:
	scripts/fresh-machine-check.sh

# The packages whose tests use a Kafka-protocol broker, run against real
# Apache Kafka (fetched with mvn, started on loopback) instead of the
# in-process kfake. Fails loudly if the broker cannot be had.
KAFKA_TEST_PACKAGES = $$($(GO) list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./... | awk '/internal\/kafkatest/ {print $$1}')
test-kafka:
	@out=$$(scripts/kafka-local.sh start) || { echo "test-kafka: could not start Apache Kafka" >&2; exit 1; }; \
	export "$$out"; echo "$$out"; \
	$(GO) test -race -count=1 -timeout 20m $(KAFKA_TEST_PACKAGES); status=$$?; \
	scripts/kafka-local.sh stop; exit $$status

# The fault suite (docs/reliability.md): real processes on loopback, faults
# on purpose, invariants checked against the provider's ledger, the tables
# and the topic. Its tests carry the build tag "fault", so `make test` does
# not run them. First everything on an in-process Kafka-protocol broker,
# then the broker outage against real Apache Kafka (scripts/kafka-local.sh,
# on ports of its own so it never meets test-kafka's broker).
FAULT_FLAGS ?=
FAULT_KAFKA_PORTS = KAFKA_PORT=19192 KAFKA_CONTROLLER_PORT=19193
test-fault:
	$(GO) test -race -tags fault -count=1 -timeout 15m -v -skip 'TestBrokerOutage' ./test/fault/ $(FAULT_FLAGS)
	@out=$$($(FAULT_KAFKA_PORTS) scripts/kafka-local.sh start) || { echo "test-fault: could not start Apache Kafka" >&2; exit 1; }; \
	export "$$out"; echo "$$out"; \
	$(FAULT_KAFKA_PORTS) FAULT_KAFKA_SCRIPT=$(CURDIR)/scripts/kafka-local.sh \
	  $(GO) test -race -tags fault -count=1 -timeout 10m -v -run 'TestBrokerOutage' ./test/fault/; status=$$?; \
	$(FAULT_KAFKA_PORTS) scripts/kafka-local.sh stop; exit $$status

# The failover suite (docs/reliability.md, "Failover"): a local Patroni
# cluster behind HAProxy (scripts/pg-ha-local.sh, on ports of its own),
# started here and stopped after, whatever the result. Its test carries the
# build tags fault and failover, so neither make test nor make test-fault
# runs it. PG_HA_MUTANT=direct runs it with the replicas pointed straight
# at the first primary, which the suite must catch.
test-failover:
	@scripts/install-test-packages.sh failover
	@env=$$(scripts/pg-ha-local.sh start) || { echo "test-failover: could not start the HA stack" >&2; scripts/pg-ha-local.sh stop; exit 1; }; \
	for l in $$env; do export "$$l"; done; \
	PG_HA_SCRIPT=$(CURDIR)/scripts/pg-ha-local.sh \
	  $(GO) test -race -tags fault,failover -count=1 -timeout 20m -v -run 'TestFailover' ./test/fault/ $(FAULT_FLAGS); status=$$?; \
	scripts/pg-ha-local.sh stop; exit $$status

# The long seeded run whose result docs/reliability.md reports. The service
# is built without -race here, to get through the rounds in about an hour.
test-fault-long:
	$(GO) test -tags fault -count=1 -timeout 3h -v -run 'TestSeededFaultRounds' ./test/fault/ -rounds 10000 -race-binary=false $(FAULT_FLAGS)

# The rolling deploy's long run (docs/deploying.md, docs/reliability.md):
# the previous release (deploy/previous-release) and this one through the
# migrations, 150 seeded fault rounds after each replica is rolled. The
# short run (4 rounds each) is part of test-fault.
test-fault-rolling-long:
	$(GO) test -tags fault -count=1 -timeout 2h -v -run 'TestRollingDeployMixedFleet' ./test/fault/ -mixed-rounds 150 -race-binary=false $(FAULT_FLAGS)

# Each fuzz target for FUZZTIME (scripts/fuzz.sh). The inputs the fuzzer
# found interesting are copied into the package's testdata/fuzz (commit them
# to keep them); without -fuzz, `make test` runs every target over that
# corpus.
FUZZTIME ?= 20s
FUZZ_TARGETS = ./internal/http:FuzzDecodeCharge ./internal/http:FuzzDecodeRefund ./internal/http:FuzzParseIdempotencyKey ./internal/http:FuzzWellFormedChargeAgreesWithTheThoroughDecoder ./internal/app:FuzzCommandHash ./internal/consumer:FuzzDecodeOrderEvent ./internal/provider/payoutreport:FuzzParse
fuzz:
	@FUZZTIME=$(FUZZTIME) GO=$(GO) scripts/fuzz.sh $(FUZZ_TARGETS)

# Schemathesis (property-based API tests from api/openapi.yaml) against
# cmd/payment-dev on free loopback ports: every check, the stateful phase
# along the contract's links, a fixed seed (CONTRACT_FUZZ_SEED replays
# another). Needs python3; installs Schemathesis into .contract-fuzz/.
contract-fuzz:
	@GO=$(GO) scripts/contract-fuzz/run.sh

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@# go vet's analyzers, staticcheck and the linters of .golangci.yml, in
	@# one pass with the fault, pgbench and pathfiles tags (they add files and hide none).
	$(GO) run $(GOLANGCI_LINT) run ./...
	@# The domain imports only the standard library, decimal and uuid.
	@bad=$$($(GO) list -f '{{join .Imports "\n"}}' ./internal/domain/ | grep '\.' | grep -v -e '^github.com/shopspring/decimal$$' -e '^github.com/google/uuid$$'); \
	  if [ -n "$$bad" ]; then echo "internal/domain must not import:"; echo "$$bad"; exit 1; fi
	@# The use cases and their ports (internal/app) import no adapter: of this
	@# module's packages, only the domain (docs/architecture.md).
	@mod=$$($(GO) list -m); bad=$$($(GO) list -f '{{join .Imports "\n"}}' ./internal/app/ | grep "^$$mod/" | grep -v "^$$mod/internal/domain$$"); \
	  if [ -n "$$bad" ]; then echo "internal/app must not import:"; echo "$$bad"; exit 1; fi
	@# Only the commands wire the service (and internal/servicetest runs it in
	@# tests): no other package imports internal/service.
	@mod=$$($(GO) list -m); bad=$$($(GO) list -f '{{.ImportPath}}: {{join .Imports " "}}' ./internal/... | grep -v -e "^$$mod/internal/service:" -e "^$$mod/internal/servicetest:" | grep " $$mod/internal/service\( \|$$\)" | cut -d: -f1); \
	  if [ -n "$$bad" ]; then echo "only cmd/ may import internal/service; these do:"; echo "$$bad"; exit 1; fi
	@# The production binary never links the in-process test broker, nor the
	@# sandbox provider's server, nor the Stripe fake (it talks to a provider
	@# over HTTP only).
	@if $(GO) list -deps ./cmd/payment-service | grep -q 'pkg/kfake'; then echo "cmd/payment-service links kfake"; exit 1; fi
	@if $(GO) list -deps ./cmd/payment-service | grep -q 'internal/sandboxprovider'; then echo "cmd/payment-service links the sandbox provider's server"; exit 1; fi
	@if $(GO) list -deps ./cmd/payment-service | grep -q 'internal/stripefake'; then echo "cmd/payment-service links the Stripe fake"; exit 1; fi

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/payment-service ./cmd/payment-service
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/sandbox-provider ./cmd/sandbox-provider

migrate:
	$(GO) run ./cmd/payment-service migrate up

bench:
	$(GO) test -run '^$$' -bench . -benchtime 3s ./internal/...

# POST /payments at the database's speed (docs/benchmarks.md): the service
# binary with its defaults against pgbench running its own statements, in
# one run, then the chart. BENCH_API_FLAGS, e.g. "-passes 1 -duration 5s".
bench-api:
	$(GO) run ./cmd/bench-api -out docs/bench-api.json $(BENCH_API_FLAGS)
	cd scripts/bench-chart && $(GO) run . -in ../../docs/bench-api.json -out ../../docs/bench-api.png

# Cost as the tables grow (docs/benchmarks.md): new charges and
# replays at 16 clients on empty tables against tables of 1,000,000 and
# 3,000,000 rows each, then purge cycles under load, unpaced and at the
# default CLEANUP_ROWS_PER_SECOND in turn; then the chart. Not part of CI
# (the fills alone take about 15 minutes on 2 cores). BENCH_SCALE_FLAGS
# override (a later flag wins), e.g. "-passes 2 -prefill 10000000 -purge-cycles 0"
# with BENCH_SCALE_OUT=docs/bench-scale-10m.json.
# The chart also draws docs/bench-scale-10m.json (the 10,000,000-row run)
# when it is there.
BENCH_SCALE_OUT ?= docs/bench-scale.json
comma := ,
BENCH_SCALE_CHART_IN = $(abspath $(BENCH_SCALE_OUT))$(if $(filter-out $(abspath $(BENCH_SCALE_OUT)),$(wildcard $(CURDIR)/docs/bench-scale-10m.json)),$(comma)$(CURDIR)/docs/bench-scale-10m.json)
bench-scale:
	$(GO) run ./cmd/bench-api -scale -passes 3 -prefill 1000000,3000000 -purge-cycles 4 -purge-rows 250000 -purge-rates 0,10000 -out $(BENCH_SCALE_OUT) $(BENCH_SCALE_FLAGS)
	cd scripts/bench-chart && $(GO) run . -scale -in $(BENCH_SCALE_CHART_IN) -out $(CURDIR)/docs/bench-scale.png

# Tracing off and on side by side, over real HTTP and PostgreSQL, and the
# per-request instrumentation alone (docs/benchmarks.md).
bench-tracing:
	$(GO) test -run '^$$' -bench BenchmarkInstrumentation -benchmem -count 3 ./internal/telemetry/
	$(GO) test -run '^$$' -bench BenchmarkTracing -benchtime 2000x -count 3 ./internal/http/

docs-screenshot:
	DOCS_SCREENSHOT=$(CURDIR)/docs/api-docs.png $(GO) test -count=1 -run TestDocsPageInABrowserChargesAnOrder ./internal/http/

# The files each path runs (the README's table): payment-dev built with
# the tag pathfiles and coverage of every package runs make dev's stack
# and each path PATHFILES_RUNS times after a warm-up, and counts a file
# when more than half of the runs ran it (cmd/payment-dev/pathfiles.go
# states the rule). make test builds no such binary.
PATHFILES_RUNS ?= 5
path-files:
	$(GO) test -tags pathfiles -count=1 -run '^TestPathFilesRule$$' ./cmd/payment-dev/
	$(GO) build -tags pathfiles -cover -covermode=atomic -coverpkg=./... -o $(BIN)/path-files ./cmd/payment-dev
	@# GOCOVERDIR takes what a -cover binary writes at its exit, unused here.
	@cover=$$(mktemp -d); GO=$(GO) PATHFILES_RUNS=$(PATHFILES_RUNS) GOCOVERDIR=$$cover $(BIN)/path-files; \
	  status=$$?; rm -rf $$cover; exit $$status

# The idempotency protocol as Promela models: the charge's (model/payment.pml),
# the refund's (model/refund.pml), a saga's step and its compensation
# (model/saga.pml), the captures and voids of an authorization
# (model/twostep.pml); docs/model.md. Needs spin (Debian:
# apt-get install spin) and a C compiler.
# model: the exhaustive checks and the witnesses that keep them from passing
# vacuously; model-mutants: each mutant must produce its counterexample, so a
# model that stops catching a mutant fails the build too.
model:
	scripts/model-check.sh checks witnesses refund-checks refund-witnesses saga-checks saga-witnesses \
		twostep-checks twostep-witnesses

model-mutants:
	scripts/model-check.sh mutants refund-mutants saga-mutants twostep-mutants

model-mutant-nofence model-mutant-findsave model-mutant-delunknown model-mutant-noorderidx model-mutant-nolease \
model-mutant-nolookup model-mutant-busyasnone model-mutant-nosettle model-mutant-nowait \
model-mutant-hooknofence model-mutant-hookfinal model-mutant-hooknodedup \
model-mutant-unboundguess model-mutant-notifyguess \
model-mutant-refund-checkthenact model-mutant-refund-newkey model-mutant-refund-nofence \
model-mutant-refund-nocommand model-mutant-refund-delunknown model-mutant-refund-nolease \
model-mutant-refund-nowait model-mutant-saga-notombstone model-mutant-saga-nowait model-mutant-twostep-noindex model-mutant-twostep-statefirst:
	scripts/model-check.sh $(patsubst model-mutant-%,%,$@)

# Larger bounds: minutes per run, up to MODEL_MEMLIM MB each; not run by CI.
model-deep:
	scripts/model-check.sh deep refund-deep
