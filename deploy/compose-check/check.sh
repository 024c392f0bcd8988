#!/usr/bin/env bash
# deploy/compose-check/check.sh (make compose-check): `docker compose up`,
# proven. Runs the repository's Dockerfile and docker-compose.yml unchanged
# on a Docker daemon of its own, with stand-in base images built here, and
# checks that the stack works: every health check, `make demo`, an order
# event projected, a charge refunded, the provider's webhooks delivered, a
# trace received, Prometheus scraping, and a saga step sent by command
# answered on payment.replies.
# docs/compose-check.md says what each stand-in image is and how it differs
# from upstream.
#
# The network rule of the machines it runs on: nothing is ever sent to any
# address but 127.0.0.0/8. So the daemon runs with no bridge and no
# iptables rules, every build and every container uses the host's network
# (compose.host-network.yml), and no image is ever pulled: every image that
# the compose file and the Dockerfile name is built here first, and the
# daemon's registry traffic goes to a proxy address on 127.0.0.1 that
# answers nothing. The Dockerfile's bases are pinned by digest, which no
# image built here has: they are build arguments, and the build is given
# the stand-ins' tags (dockerfile_bases). The downloads the builds need come from where the machine
# gets them: Debian's packages from the mirror of its apt sources
# (debootstrap), Go modules from its `go env GOPROXY`, the Kafka jars from
# its Maven repository; the images trust its CA certificates.
#
# Needs root, dockerd (docker.io), docker-compose, debootstrap, mvn, go,
# curl and jq. Whatever happens, it ends with the stack down (down -v), the
# daemon stopped, and no mount or process of its own left.
#
# Environment (all optional):
#   COMPOSE_CHECK_CACHE    the cache: debootstrap's root, the Kafka jars, the
#                          daemon's images (default ~/.cache/payment-service/compose)
#   COMPOSE_CHECK_TIMEOUT  seconds for the stack to become healthy (default 600)
#   COMPOSE_CHECK_BUILD_TIMEOUT  seconds for docker-compose build (default 2400:
#                          the Go build in Docker has no build cache, and takes
#                          9 minutes on a busy 2-core machine)
#   COMPOSE_CHECK_OVERRIDE one more compose file, applied last: to try a change
#                          of the wiring without touching docker-compose.yml
#                          (docs/compose-check.md shows two that must fail)
set -Eeuo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${HERE}/../.." && pwd)"
# shellcheck source=../../scripts/lib/unmount-under.sh
source "${ROOT}/scripts/lib/unmount-under.sh"
CACHE="${COMPOSE_CHECK_CACHE:-${HOME}/.cache/payment-service/compose}"
RUN="${CACHE}/run"
TIMEOUT="${COMPOSE_CHECK_TIMEOUT:-600}"
BUILD_TIMEOUT="${COMPOSE_CHECK_BUILD_TIMEOUT:-2400}"

# The base of every stand-in: Debian bookworm from debootstrap, with the
# packages the stand-ins need. A new list makes a new root (its name holds
# the list's hash).
BASE_IMAGE=payment-service-compose-check/bookworm
BASE_PACKAGES=ca-certificates,netbase,procps,postgresql-15,openjdk-17-jre-headless,prometheus

# The ports compose's services listen on, all on the host's network here.
PORTS=(5432 9092 9093 29092 8080 8081 4318 16686 9090 3000)

export DOCKER_HOST="unix://${RUN}/docker.sock"
export COMPOSE_PROJECT_NAME=paymentcheck
# The classic builder: Debian's daemon has no BuildKit front end to pull, and
# docker-compose (1.x) builds through the daemon's API.
export DOCKER_BUILDKIT=0 COMPOSE_DOCKER_CLI_BUILD=0

started=$SECONDS
log() { printf '\n== compose-check [%ds] %s\n' "$((SECONDS - started))" "$*" >&2; }
# The service a failure is about: its last log lines are printed.
suspect=""
die() {
  echo "compose-check: FAILED: $*" >&2
  exit 1
}

# The stack as check.sh runs it: written by write_variant, outside the build
# context.
COMPOSE=(docker-compose -f "${RUN}/compose.yml")
compose() { "${COMPOSE[@]}" "$@"; }

# write_variant: docker-compose.yml with compose.host-network.yml (and
# COMPOSE_CHECK_OVERRIDE), merged, minus every `ports:`. docker-compose 1.x
# refuses published ports on the host's network, and an override file cannot
# remove a key; so the merged file is written without them, and checked to
# differ from the merge in nothing else.
write_variant() {
  local files=(-f "${ROOT}/docker-compose.yml" -f "${HERE}/compose.host-network.yml") other
  [[ -z "${COMPOSE_CHECK_OVERRIDE:-}" ]] || files+=(-f "$COMPOSE_CHECK_OVERRIDE")
  mkdir -p "$RUN"
  docker-compose "${files[@]}" config >"${RUN}/compose.merged.yml"
  awk '/^    ports:$/ {skip = 1; next} skip && /^    (- |  )/ {next} {skip = 0; print}' \
    "${RUN}/compose.merged.yml" >"${RUN}/compose.yml"
  other="$(diff "${RUN}/compose.merged.yml" "${RUN}/compose.yml" | grep -E '^[<>]' | grep -v -E '^<     (ports:$|- )' || true)"
  [[ -z "$other" ]] || die "the run-time variant differs from the merged compose file in more than ports: ${other}"
  ! grep -q -E '^    ports:' "${RUN}/compose.yml" || die "the run-time variant still publishes ports"
  [[ "$(grep -c '^    network_mode: host$' "${RUN}/compose.yml")" == "$(compose config --services | wc -l)" ]] \
    || die "a service of docker-compose.yml is not on the host's network: add it to compose.host-network.yml"
}

# ---------------------------------------------------------------- daemon

daemon_pid=""

start_daemon() {
  mkdir -p "${RUN}" "${CACHE}/docker"
  if [[ -e "${RUN}/dockerd.pid" ]] && kill -0 "$(cat "${RUN}/dockerd.pid")" 2>/dev/null; then
    die "a daemon of compose-check is already running (pid $(cat "${RUN}/dockerd.pid")): another check?"
  fi
  rm -f "${RUN}/docker.sock"
  # No bridge, no iptables rules, no forwarding, no masquerading: no
  # container network exists but host and none.
  cat >"${RUN}/daemon.json" <<EOF
{
  "hosts": ["unix://${RUN}/docker.sock"],
  "data-root": "${CACHE}/docker",
  "exec-root": "${RUN}/exec",
  "pidfile": "${RUN}/dockerd.pid",
  "bridge": "none",
  "iptables": false,
  "ip6tables": false,
  "ip-forward": false,
  "ip-masq": false,
  "userland-proxy": false
}
EOF
  # A pull would go to a registry: send the daemon's registry traffic to a
  # port on 127.0.0.1 where nothing answers, so that it fails at once.
  HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 NO_PROXY= \
    nice -n 10 dockerd --config-file "${RUN}/daemon.json" </dev/null >"${RUN}/dockerd.log" 2>&1 &
  daemon_pid=$!
  local deadline=$((SECONDS + 60))
  until docker version >/dev/null 2>&1; do
    if ! kill -0 "$daemon_pid" 2>/dev/null; then
      tail -n 30 "${RUN}/dockerd.log" >&2
      die "dockerd exited at start (its log above)"
    fi
    ((SECONDS < deadline)) || { tail -n 30 "${RUN}/dockerd.log" >&2; die "dockerd did not answer within 60 s"; }
    sleep 0.5
  done
  check_networks
}

# Only Docker's host and none networks may exist: any other (a bridge) would
# be on a private range.
check_networks() {
  local others
  others="$(docker network ls --format '{{.Name}} {{.Driver}}' | grep -v -E '^(host host|none null)$' || true)"
  [[ -z "$others" ]] || die "networks other than host and none exist: ${others}"
}

stop_daemon() {
  [[ -n "$daemon_pid" ]] || return 0
  kill -TERM "$daemon_pid" 2>/dev/null || true
  local deadline=$((SECONDS + 60))
  while kill -0 "$daemon_pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.5; done
  kill -KILL "$daemon_pid" 2>/dev/null || true
  wait "$daemon_pid" 2>/dev/null || true
  daemon_pid=""
  # What the daemon started (containerd, shims) runs under its exec root;
  # end any of them that outlived it, by id.
  local proc cmdline
  for proc in /proc/[0-9]*; do
    cmdline="$({ tr '\0' ' ' <"${proc}/cmdline"; } 2>/dev/null)" || continue
    if [[ "$cmdline" == *"${RUN}/exec"* ]]; then
      echo "compose-check: ending leftover process ${proc#/proc/}: ${cmdline}" >&2
      kill -KILL "${proc#/proc/}" 2>/dev/null || true
    fi
  done
  # And no mount of ours may stay (overlays, debootstrap's /proc, ...).
  unmount_under "$CACHE"
  rm -f "${RUN}/docker.sock"
}

# ---------------------------------------------------------------- failure

# The last log lines of the suspect service, or of every service that is
# not as it should be.
show_failure() {
  local services service
  if [[ -z "$(compose ps -q 2>/dev/null)" ]]; then
    echo "compose-check: no container was created" >&2
    return 0
  fi
  services="${suspect:-$(compose ps --services 2>/dev/null)}"
  echo "compose-check: the state of the stack:" >&2
  compose ps >&2 2>/dev/null || true
  local id
  for service in $services; do
    echo "----- last 40 log lines of ${service} -----" >&2
    compose logs --no-color --tail=40 "$service" >&2 2>/dev/null || true
    # A failing health check says why in its own log, not in the service's.
    for id in $(compose ps -q "$service" 2>/dev/null); do
      docker inspect -f '{{json .State.Health}}' "$id" 2>/dev/null |
        jq -r 'select(. != null and (.Log | length) > 0) | .Log[-1] | "----- its last health check: exit \(.ExitCode): \(.Output)"' >&2 || true
    done
  done
}

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [[ -n "$daemon_pid" ]]; then
    ((status == 0)) || show_failure
    log "down -v, then the daemon stops"
    timeout 120 "${COMPOSE[@]}" down -v --remove-orphans --timeout 20 >&2 || echo "compose-check: down -v failed" >&2
    # Images that a newer build replaced (among them the Dockerfile's build
    # stage of an older source), once a day old: a rerun within the day
    # finds its build cache, and the cache does not grow run by run.
    timeout 60 docker image prune -f --filter until=24h >/dev/null || true
  fi
  stop_daemon
  if ((status == 0)); then
    log "passed in $((SECONDS - started)) s"
  else
    log "failed after $((SECONDS - started)) s"
  fi
  exit "$status"
}

# ---------------------------------------------------------------- images

# The Debian mirror this machine's apt uses for bookworm itself, read at
# run time (scripts/debian-mirror.sh, shared with make fresh-machine-check).
debian_mirror() { "${ROOT}/scripts/debian-mirror.sh"; }

# The base image, imported from a root file system made by debootstrap
# (kept in the cache as a tar, so that a new daemon cache needs no download).
ensure_base_image() {
  docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 && return 0
  local tar root mirror
  tar="${CACHE}/bookworm-$(printf '%s' "$BASE_PACKAGES" | sha256sum | cut -c1-12).tar"
  if [[ ! -s "$tar" ]]; then
    mirror="$(debian_mirror)"
    [[ -n "$mirror" ]] || die "no Debian bookworm mirror in /etc/apt/sources.list*"
    root="${CACHE}/rootfs.tmp"
    rm -rf "$root"
    log "debootstrap bookworm from ${mirror} (first run only): ${BASE_PACKAGES}"
    if ! nice -n 10 debootstrap --variant=minbase --include="$BASE_PACKAGES" bookworm "$root" "$mirror" \
        >"${CACHE}/debootstrap.log" 2>&1; then
      tail -n 30 "${CACHE}/debootstrap.log" >&2
      die "debootstrap failed (${CACHE}/debootstrap.log)"
    fi
    rm -rf "${root}"/var/cache/apt/archives/*.deb "${root}"/var/lib/apt/lists/*
    tar -C "$root" --numeric-owner -cf "${tar}.tmp" .
    mv -f "${tar}.tmp" "$tar"
    rm -rf "$root"
  fi
  log "importing ${tar} as ${BASE_IMAGE}"
  docker import "$tar" "$BASE_IMAGE" >/dev/null
}

# The Apache Kafka jars of version $1, from Maven (images/kafka/pom.xml),
# kept in the cache.
kafka_libs() {
  local version="$1" dir="${CACHE}/kafka-${1}/libs"
  if [[ ! -f "${dir}/kafka_2.13-${version}.jar" ]]; then
    log "resolving the Apache Kafka ${version} jars with mvn (first run only)"
    rm -rf "$dir"
    if ! nice -n 10 timeout 900 mvn -q -B -f "${HERE}/images/kafka/pom.xml" -Dkafka.version="$version" \
        org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$dir" >"${CACHE}/mvn.log" 2>&1; then
      tail -n 30 "${CACHE}/mvn.log" >&2
      rm -rf "$dir"
      die "mvn could not resolve the Kafka ${version} jars (${CACHE}/mvn.log)"
    fi
    local slf4j
    slf4j="$(cd "$dir" && ls slf4j-api-*.jar)"
    [[ "$slf4j" == "slf4j-api-$(cd "$dir" && ls slf4j-simple-*.jar | sed 's/^slf4j-simple-//')" ]] \
      || die "the Kafka ${version} jars bring ${slf4j}: set slf4j.version in images/kafka/pom.xml to its version"
  fi
  echo "$dir"
}

# build_standin NAME TAG [BUILD-ARG...]: builds images/NAME under TAG, in a
# build context of its own with the machine's CA certificates, unless TAG
# already holds a build of the same inputs. Extra files for the context
# are put in ${ctx} by the caller's ctx_extra function, if any.
build_standin() {
  local name="$1" tag="$2" ctx="${RUN}/ctx/${1}" stamp arg
  shift 2
  rm -rf "$ctx"
  mkdir -p "$ctx"
  cp -a "${HERE}/images/${name}/." "$ctx/"
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/ca-certificates.crt"
  if declare -F ctx_extra >/dev/null; then ctx_extra "$ctx"; fi
  # What the image is made of: the context's file list and contents (the Go
  # toolchain by its version), and the build arguments.
  stamp="$({ (cd "$ctx" && find . -path ./go -prune -o -type f -print0 | sort -z | xargs -0 sha256sum)
             [[ -d "$ctx/go" ]] && cat "$ctx/go/VERSION"; printf '%s\n' "$@"; } | sha256sum | cut -c1-16)"
  if [[ "$(docker image inspect -f '{{index .Config.Labels "compose-check.inputs"}}' "$tag" 2>/dev/null)" == "$stamp" ]]; then
    echo "compose-check: ${tag} is up to date" >&2
    return 0
  fi
  local args=(--network host --pull=false --label "compose-check.inputs=${stamp}" -t "$tag")
  for arg in "$@"; do args+=(--build-arg "$arg"); done
  log "building the stand-in ${tag} (images/${name})"
  nice -n 10 docker build -q "${args[@]}" "$ctx" >/dev/null
}

# The Dockerfile's base images, one "ARGUMENT TAG" a line: each build
# argument *_IMAGE declared before the first FROM, its default without its
# digest. The Dockerfile pins every base by digest in such a default; a
# stand-in built here has no registry digest, so name:tag@sha256:... cannot
# name it. So the stand-in is built under the tag, and the tag is given to
# the build as the argument (BASE_ARGS, docker-compose build --build-arg).
dockerfile_bases() {
  awk '/^FROM / {exit}
       /^ARG [A-Z0-9_]+_IMAGE=/ {
         sub(/^ARG /, ""); i = index($0, "=")
         ref = substr($0, i + 1); sub(/@sha256:[0-9a-f]+$/, "", ref)
         print substr($0, 1, i - 1), ref
       }' "${ROOT}/Dockerfile"
}
BASE_ARGS=()

# Every image the Dockerfile and the compose file name, each built from its
# stand-in; a name with no stand-in is an error (a new service, or a new
# upstream version, needs one).
build_standins() {
  local image version arg literal
  # A base named in FROM itself could not be given a stand-in: only an
  # argument can be.
  literal="$(grep -E '^FROM [^ $]*[:/]' "${ROOT}/Dockerfile" || true)"
  [[ -z "$literal" ]] || die "the Dockerfile names a base image in FROM itself (${literal}): give it as an ARG ..._IMAGE before the first FROM, as the others are"
  BASE_ARGS=()
  while read -r arg image <&3; do
    BASE_ARGS+=(--build-arg "${arg}=${image}")
    case "$image" in
      golang:*-bookworm)
        version="${image#golang:}"
        version="${version%-bookworm}"
        [[ "$(go env GOVERSION)" == "go${version}" || "$(go env GOVERSION)" == go${version}.* ]] \
          || die "the Dockerfile builds with ${image} but this machine's Go is $(go env GOVERSION)"
        ctx_extra() { cp -al "$(go env GOROOT)" "$1/go" 2>/dev/null || cp -a "$(go env GOROOT)" "$1/go"; }
        build_standin golang "$image" "GOPROXY=$(go env GOPROXY)"
        unset -f ctx_extra
        ;;
      gcr.io/distroless/static-debian12:nonroot) build_standin distroless "$image" ;;
      *) die "the Dockerfile names ${image}, which has no stand-in in deploy/compose-check/images" ;;
    esac
  done 3< <(dockerfile_bases)
  ((${#BASE_ARGS[@]} > 0)) || die "the Dockerfile declares no ARG ..._IMAGE before its first FROM: no base image found"
  for image in $(compose config | awk '$1 == "image:" {print $2}' | sort -u); do
    case "$image" in
      postgres:*-bookworm)
        version="${image#postgres:}"
        build_standin postgres "$image" "PG_MAJOR=${version%%[.-]*}"
        ;;
      apache/kafka:*)
        KAFKA_LIBS="$(kafka_libs "${image#apache/kafka:}")"
        ctx_extra() { cp -al "$KAFKA_LIBS" "$1/libs" 2>/dev/null || cp -a "$KAFKA_LIBS" "$1/libs"; }
        build_standin kafka "$image"
        unset -f ctx_extra
        ;;
      prom/prometheus:*) build_standin prometheus "$image" ;;
      jaegertracing/jaeger:* | grafana/grafana:*)
        ctx_extra() { (cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -o "$1/standin" ./deploy/compose-check/standin); }
        build_standin standins "$image" "STANDIN=$(basename "${image%%:*}")"
        unset -f ctx_extra
        ;;
      *) die "docker-compose.yml names ${image}, which has no stand-in in deploy/compose-check/images" ;;
    esac
  done
}

# ---------------------------------------------------------------- the stack

# wait_stack SECONDS: every service as it should be within SECONDS: the ones
# with a health check healthy, the one-shots exited 0, the rest running.
# Dies naming the first service that is not (wait_stack 0: as they are now).
wait_stack() {
  local deadline=$((SECONDS + $1)) service id state pending
  while :; do
    pending=""
    for service in $(compose config --services); do
      id="$(compose ps -q "$service")"
      [[ -n "$id" ]] || { pending+=" ${service}(not created)"; continue; }
      state="$(docker inspect -f '{{.State.Status}}/{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}/{{.State.ExitCode}}' "$id")"
      case "$service/$state" in
        kafka-init/exited/*/0 | seed-orders/exited/*/0) ;;
        kafka-init/exited/* | seed-orders/exited/*) suspect="$service"; die "${service} exited with code ${state##*/}" ;;
        */running/healthy/* | */running/none/*) ;;
        */running/starting/* | */created/*) pending+=" ${service}(${state%/*})" ;;
        */running/unhealthy/*) suspect="$service"; die "${service} is unhealthy" ;;
        *) suspect="$service"; die "${service} is ${state%/*} (exit code ${state##*/}), where it should be running" ;;
      esac
    done
    [[ -n "$pending" ]] || return 0
    ((SECONDS < deadline)) || { suspect="${pending%%(*}"; suspect="${suspect# }"; die "not ready within ${1} s:${pending}"; }
    sleep 2
  done
}

# http_code METHOD URL [curl args...]: the status code; the body in ${RUN}/body.
http_code() {
  local method="$1" url="$2"
  shift 2
  curl -sS -o "${RUN}/body" -w '%{http_code}' --max-time 10 -X "$method" "$@" "$url" || echo 000
}

# An order event published from inside the broker's container, the order
# projected (the charge is refused 422 until it is), then charged and
# refunded over the service's API.
check_order_charge_refund() {
  local order_id event_id key code payment_id
  order_id=$((800000000 + $(date +%s) % 100000000))
  event_id="$(cat /proc/sys/kernel/random/uuid)"
  suspect=kafka
  log "publishing OrderCreated.v1 for order ${order_id} with kafka-console-producer, inside the kafka container"
  printf '%s|{"eventId":"%s","sagaId":"%s","eventType":"OrderCreated.v1","orderId":%s,"customerId":42,"amount":250.00,"currency":"RUB","occurredAt":"%s"}\n' \
    "$order_id" "$event_id" "$(cat /proc/sys/kernel/random/uuid)" "$order_id" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" |
    timeout 120 "${COMPOSE[@]}" exec -T kafka /opt/kafka/bin/kafka-console-producer.sh --bootstrap-server kafka:29092 \
      --topic order.events --reader-property parse.key=true --reader-property key.separator='|' >&2

  suspect=payment-service
  key="compose-check-charge-${order_id}"
  local deadline=$((SECONDS + 60))
  while :; do
    code="$(http_code POST http://127.0.0.1:8080/payments -H 'Authorization: Bearer demo-secret' \
      -H "Idempotency-Key: ${key}" -H 'Content-Type: application/json' \
      -d "{\"orderId\":${order_id},\"customerId\":42,\"amount\":\"250.00\",\"currency\":\"RUB\",\"paymentProvider\":\"sandbox\",\"externalPaymentId\":\"pi_compose_check_${order_id}\"}")"
    [[ "$code" == 422 ]] && grep -q order-not-found "${RUN}/body" || break
    ((SECONDS < deadline)) || die "order ${order_id} was not projected within 60 s (POST /payments still answers 422 order-not-found)"
    sleep 1
  done
  [[ "$code" == 201 ]] || die "POST /payments answered ${code}, want 201: $(cat "${RUN}/body")"
  payment_id="$(jq -er .id "${RUN}/body")"
  code="$(http_code GET "http://127.0.0.1:8080/orders/${order_id}" -H 'Authorization: Bearer demo-secret')"
  [[ "$code" == 200 ]] || die "GET /orders/${order_id} answered ${code}, want 200: $(cat "${RUN}/body")"
  echo "compose-check: order ${order_id} projected and charged: payment ${payment_id}" >&2

  code="$(http_code POST "http://127.0.0.1:8080/payments/${payment_id}/refunds" -H 'Authorization: Bearer demo-secret' \
    -H "Idempotency-Key: compose-check-refund-${order_id}" -H 'Content-Type: application/json' \
    -d "{\"amount\":\"100.00\",\"externalRefundId\":\"re_compose_check_${order_id}\"}")"
  [[ "$code" == 201 ]] || die "POST /payments/${payment_id}/refunds answered ${code}, want 201: $(cat "${RUN}/body")"
  echo "compose-check: refund of 100.00 on payment ${payment_id}: 201, $(jq -c '{id, status}' "${RUN}/body")" >&2
}

# poll_json URL FILTER WHAT: waits, 60 s at most, until GET URL answers 200
# with a body for which the jq FILTER holds; else fails saying that WHAT
# did not happen.
poll_json() {
  local deadline=$((SECONDS + 60))
  until [[ "$(http_code GET "$1")" == 200 ]] && jq -e "$2" "${RUN}/body" >/dev/null; do
    ((SECONDS < deadline)) || die "$3 within 60 s: $(cat "${RUN}/body")"
    sleep 2
  done
}

# The sandbox provider's webhooks reached the service: every event it made
# for the demo's and the check's decisions (its lost answer's included) was
# delivered, none given up, none still pending (compose sets no webhook
# fault, so each event is delivered once or more), but the one the demo's
# reconciliation step loses on purpose (drop_hooklost_: the sandbox counts
# it under faults.lost) so that a run finds the charge.
check_webhooks() {
  suspect=sandbox-provider
  poll_json http://127.0.0.1:8081/v1/ledger \
    '.webhooks | .events > 0 and .pending == 0 and .expired == 0 and .deliveries + (.faults.lost // 0) >= .events' \
    "the sandbox provider's webhooks were not all delivered to payment-service"
  echo "compose-check: the sandbox provider's webhooks were delivered: $(jq -c .webhooks "${RUN}/body")" >&2
}

# The service's traces reached the tracing endpoint (OTLP/HTTP, Jaeger's
# query API lists the service).
check_trace() {
  suspect=jaeger
  poll_json http://127.0.0.1:16686/api/services '.data | index("payment-service")' \
    "no trace of payment-service reached jaeger"
  echo "compose-check: jaeger received spans of payment-service" >&2
}

# Prometheus scrapes the service (the target is up) and loaded the rules;
# Grafana found its provisioning.
check_metrics() {
  suspect=prometheus
  poll_json http://127.0.0.1:9090/api/v1/targets \
    '.data.activeTargets[] | select(.labels.job == "payment-service" and .health == "up")' \
    "prometheus did not scrape payment-service"
  poll_json http://127.0.0.1:9090/api/v1/rules '.data.groups | length > 0' "prometheus loaded no alert rules"
  echo "compose-check: prometheus scrapes payment-service (up) and loaded $(jq '[.data.groups[].rules[]] | length' "${RUN}/body") rules" >&2
  suspect=grafana
  [[ "$(http_code GET http://127.0.0.1:3000/api/dashboards/uid/payment-service)" == 200 ]] \
    || die "grafana has no dashboard payment-service: $(cat "${RUN}/body")"
}

# A saga step by command, sent from inside the broker's container as an
# orchestrator sends it: an order event for a new order, then at once a
# ChargeOrder.v1 for it on payment.commands, keyed by its sagaId, with
# eventId and eventType headers. Its PaymentStepCharged.v1 must arrive on
# payment.replies within 60 s (the step itself waits for the order's
# projection, up to SAGA_ORDER_WAIT: 30 s).
check_saga_reply() {
  local order_id saga_id event_id reply deadline
  order_id=$((900000000 + $(date +%s) % 100000000))
  saga_id="$(cat /proc/sys/kernel/random/uuid)"
  suspect=kafka
  log "publishing OrderCreated.v1 for order ${order_id}, then ChargeOrder.v1 of saga ${saga_id} to payment.commands, with kafka-console-producer"
  printf '%s|{"eventId":"%s","sagaId":"%s","eventType":"OrderCreated.v1","orderId":%s,"customerId":42,"amount":75.25,"currency":"RUB","occurredAt":"%s"}\n' \
    "$order_id" "$(cat /proc/sys/kernel/random/uuid)" "$saga_id" "$order_id" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" |
    timeout 120 "${COMPOSE[@]}" exec -T kafka /opt/kafka/bin/kafka-console-producer.sh --bootstrap-server kafka:29092 \
      --topic order.events --reader-property parse.key=true --reader-property key.separator='|' >&2
  event_id="$(cat /proc/sys/kernel/random/uuid)"
  # Headers, a tab, the key, '|', the value: the console producer's line.
  printf 'eventId:%s,eventType:ChargeOrder.v1\t%s|{"eventId":"%s","eventType":"ChargeOrder.v1","sagaId":"%s","stepName":"charge-payment","orderId":%s,"customerId":42,"amount":"75.25","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_compose_check_saga_%s","occurredAt":"%s"}\n' \
    "$event_id" "$saga_id" "$event_id" "$saga_id" "$order_id" "$order_id" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" |
    timeout 120 "${COMPOSE[@]}" exec -T kafka /opt/kafka/bin/kafka-console-producer.sh --bootstrap-server kafka:29092 \
      --topic payment.commands --reader-property parse.headers=true --reader-property parse.key=true \
      --reader-property key.separator='|' >&2

  suspect=payment-service
  deadline=$((SECONDS + 60))
  while :; do
    # The whole topic, until it has been quiet for 3 s.
    timeout 60 "${COMPOSE[@]}" exec -T kafka /opt/kafka/bin/kafka-console-consumer.sh --bootstrap-server kafka:29092 \
      --topic payment.replies --from-beginning --timeout-ms 3000 >"${RUN}/replies" 2>"${RUN}/replies.err" || true
    reply="$(grep -F "\"sagaId\":\"${saga_id}\"" "${RUN}/replies" | head -n 1 || true)"
    [[ -z "$reply" ]] || break
    ((SECONDS < deadline)) || die "no reply to the ChargeOrder.v1 of saga ${saga_id} on payment.replies within 60 s ($(wc -l <"${RUN}/replies") replies there; the consumer said: $(tail -n 3 "${RUN}/replies.err"))"
    sleep 2
  done
  [[ "$(jq -r .eventType <<<"$reply")" == PaymentStepCharged.v1 ]] \
    || die "the ChargeOrder.v1 of saga ${saga_id} was answered ${reply}, want PaymentStepCharged.v1"
  echo "compose-check: the ChargeOrder.v1 of saga ${saga_id} was answered on payment.replies: $(jq -c '{eventType, paymentId, orderId, amount, currency}' <<<"$reply")" >&2
}

main() {
  [[ "$(id -u)" == 0 ]] || die "run as root (dockerd)"
  local tool
  for tool in dockerd docker docker-compose debootstrap mvn go curl jq; do
    command -v "$tool" >/dev/null || die "${tool} is not installed"
  done
  local port
  for port in "${PORTS[@]}"; do
    if timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/${port}" 2>/dev/null; then
      die "127.0.0.1:${port} is in use; compose's services need it on the host's network"
    fi
  done

  trap cleanup EXIT
  trap 'exit 130' INT TERM
  log "starting dockerd (no bridge, no iptables) on ${DOCKER_HOST}"
  start_daemon
  write_variant
  ensure_base_image
  build_standins

  log "docker-compose build (the repository's Dockerfile, host network, on the stand-ins: ${BASE_ARGS[*]})"
  nice -n 10 timeout "$BUILD_TIMEOUT" "${COMPOSE[@]}" build "${BASE_ARGS[@]}" >&2 || die "docker-compose build failed or took over ${BUILD_TIMEOUT} s"
  log "docker-compose up -d"
  # up -d itself waits for the health checks that services depend on; if it
  # gives up, the stack as it is then names the service that failed.
  if timeout "$TIMEOUT" "${COMPOSE[@]}" up -d >&2; then
    wait_stack "$TIMEOUT"
  else
    wait_stack 0
    die "docker-compose up failed, though every service looks fine"
  fi
  check_networks
  log "every service is healthy, or done"

  log "make demo, against compose"
  suspect=payment-service
  (cd "$ROOT" && timeout 300 make demo) >&2
  check_order_charge_refund
  check_webhooks
  check_trace
  check_metrics
  check_saga_reply
  suspect=""
}

main "$@"
