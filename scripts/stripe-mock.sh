#!/usr/bin/env bash
# scripts/stripe-mock.sh start|stop
#
# Runs stripe-mock (Stripe's own mock of its API, the tool dependency in
# go.mod, at the version go.mod pins) on loopback, for
# `make test-stripe-mock`: the Stripe adapter's stripe-mock test against a
# running instance (STRIPE_MOCK_URL). Without that variable the test starts
# a stripe-mock of its own, as `make test` runs it.
#
# stripe-mock listens for HTTP and for HTTPS; both listeners are put on
# 127.0.0.1 at ports the system picks (-http-addr and -https-addr: with
# neither it takes :12111 and :12112 on every interface, and with
# -http-addr alone HTTPS still opens on every interface). The binary is the
# one `go tool -n stripe-mock` names, built from the module cache, run
# directly, so that the pid kept is stripe-mock's own (stopping `go tool`
# would leave the tool it started running).
#
# State, under ${STRIPE_MOCK_DIR:-${TMPDIR:-/tmp}/payment-service-stripe-mock}:
#   pid   the running stripe-mock's process id
#   log   its output (kept after stop, for post-mortems)
#
# On success `start` prints exactly one line on stdout:
#   STRIPE_MOCK_URL=http://127.0.0.1:<port>
# so callers can do:  out="$(scripts/stripe-mock.sh start)" && export "$out"
# `stop` ends it by that pid (TERM, then KILL after 10 s); it is quiet and
# succeeds when nothing runs. Everything else goes to stderr.
set -Eeuo pipefail
trap 'echo "stripe-mock: ERROR: unexpected failure at line ${LINENO}: ${BASH_COMMAND}" >&2' ERR

GO="${GO:-go}"
DIR="${STRIPE_MOCK_DIR:-${TMPDIR:-/tmp}/payment-service-stripe-mock}"
START_TIMEOUT="${STRIPE_MOCK_START_TIMEOUT:-60}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

running() { [[ -f "$DIR/pid" ]] && kill -0 "$(cat "$DIR/pid")" 2>/dev/null; }

cmd_start() {
  mkdir -p "$DIR"
  if running; then
    echo "stripe-mock: already running (pid $(cat "$DIR/pid")); scripts/stripe-mock.sh stop first" >&2
    return 1
  fi
  local bin
  bin="$(cd "$ROOT" && "$GO" tool -n stripe-mock)"
  : >"$DIR/log"
  "$bin" -http-addr 127.0.0.1:0 -https-addr 127.0.0.1:0 >"$DIR/log" 2>&1 </dev/null &
  echo $! >"$DIR/pid"
  local addr="" waited=0
  while [[ -z "$addr" ]]; do
    if ! running; then
      echo "stripe-mock: exited before it listened:" >&2
      cat "$DIR/log" >&2
      rm -f "$DIR/pid"
      return 1
    fi
    if ((waited >= START_TIMEOUT * 10)); then
      echo "stripe-mock: not listening after ${START_TIMEOUT}s:" >&2
      cat "$DIR/log" >&2
      cmd_stop
      return 1
    fi
    addr="$(sed -n 's/.*Listening for HTTP at address: \(127\.0\.0\.1:[0-9]*\).*/\1/p' "$DIR/log" | head -n 1)"
    [[ -n "$addr" ]] || { sleep 0.1; waited=$((waited + 1)); }
  done
  echo "stripe-mock: pid $(cat "$DIR/pid"), $(grep -o 'Listening for HTTPS at address: [0-9.:]*' "$DIR/log" | head -n 1 || true)" >&2
  echo "STRIPE_MOCK_URL=http://$addr"
}

cmd_stop() {
  [[ -f "$DIR/pid" ]] || return 0
  local pid
  pid="$(cat "$DIR/pid")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "stripe-mock: pid $pid still running 10s after TERM: KILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$DIR/pid"
}

case "${1:-}" in
  start) cmd_start ;;
  stop)  cmd_stop ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
