#!/usr/bin/env bash
# make contract-fuzz: Schemathesis against the real service on a throwaway
# database. It starts cmd/payment-dev (the service, a throwaway
# PostgreSQL, the in-process broker and the sandbox provider, as `make dev`
# does) on free loopback ports with an API key of its own, waits for
# /readyz, runs Schemathesis with every check and a fixed seed, and stops
# payment-dev with SIGINT, which removes its data.
#
# Schemathesis lives in a virtual environment under .contract-fuzz/ (git
# ignores it), installed from requirements.txt, pinned, on first use and
# again whenever that file changes.
#
#   CONTRACT_FUZZ_SEED       the seed (default: the fixed one below); a
#                            failure names it, and the same seed replays it
#   CONTRACT_FUZZ_ARGS       more options for `schemathesis run`
set -euo pipefail
cd "$(dirname "$0")/../.."
here=scripts/contract-fuzz
work=.contract-fuzz
venv=$work/venv
seed=${CONTRACT_FUZZ_SEED:-20261202}
python=${PYTHON:-python3}
go=${GO:-go}

# Two of the pinned packages need Python 3.11; say so rather than let pip fail.
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
  { echo "contract-fuzz: needs Python 3.11 or newer ($python is $("$python" -V 2>&1))" >&2; exit 1; }

# The virtual environment, (re)built when requirements.txt changes.
if ! cmp -s "$here/requirements.txt" "$venv/requirements.txt" 2>/dev/null; then
  echo "contract-fuzz: installing Schemathesis into $venv"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
  cp "$here/requirements.txt" "$venv/requirements.txt"
fi

"$go" build -o "$work/payment-dev" ./cmd/payment-dev

# payment-dev on ports the kernel picks, so it never meets a `make dev`.
key=contract-fuzz-secret
log=$work/payment-dev.log
# The sandbox's slow_ answers come after 1 s instead of 15, so a generated
# slow_ id costs a second, not the service's whole provider timeout (the
# charge then succeeds rather than coming back outcome-unknown; the
# contract test and the fault suite cover that answer).
HTTP_ADDR=127.0.0.1:0 DEV_KAFKA_PORT=0 DEV_PROVIDER_PORT=0 API_KEYS=contract-fuzz:$key OPERATOR_CLIENTS=contract-fuzz \
  SANDBOX_SLOW_DELAY=1s LOG_LEVEL=error "$work/payment-dev" >"$log" 2>&1 &
pid=$!
stop() {
  kill -INT "$pid" 2>/dev/null || return 0
  wait "$pid" 2>/dev/null || true
}
trap stop EXIT

# Its welcome names the API's address; then /readyz says the database answers.
url=
for _ in $(seq 600); do
  url=$(sed -n 's/^  API *\(http:[^ ]*\).*/\1/p' "$log")
  [ -n "$url" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; echo "contract-fuzz: payment-dev exited" >&2; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { cat "$log" >&2; echo "contract-fuzz: payment-dev did not start in 60 s" >&2; exit 1; }
ready="import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/readyz', timeout=1)"
for i in $(seq 100); do
  "$venv/bin/python" -c "$ready" "$url" 2>/dev/null && break
  [ "$i" -lt 100 ] || { cat "$log" >&2; echo "contract-fuzz: $url/readyz never answered 200" >&2; exit 1; }
  sleep 0.1
done

# Orders for the charges hooks.py points at them (the demo orders are
# written the same way, by payment-dev's seed).
dsn=$(sed -n "s/^  database *psql '\([^']*\)'.*/\1/p" "$log")
psql=$(command -v psql || ls /usr/lib/postgresql/*/bin/psql | tail -n 1)
export FUZZ_ORDER_FIRST=900000001 FUZZ_ORDER_COUNT=100000 FUZZ_CUSTOMER=4242 FUZZ_AMOUNT=100.00 FUZZ_CURRENCY=EUR
"$psql" -q -v ON_ERROR_STOP=1 "$dsn" -c "INSERT INTO order_projection (order_id, customer_id, amount, currency)
  SELECT g, $FUZZ_CUSTOMER, $FUZZ_AMOUNT, '$FUZZ_CURRENCY' FROM generate_series($FUZZ_ORDER_FIRST, $FUZZ_ORDER_FIRST + $FUZZ_ORDER_COUNT - 1) AS g"
export SCHEMATHESIS_HOOKS=$here/hooks.py
# Hypothesis's own files go under .contract-fuzz/ too, not the working tree.
export HYPOTHESIS_STORAGE_DIRECTORY=$work/hypothesis

echo "contract-fuzz: $url, seed $seed (replay: CONTRACT_FUZZ_SEED=$seed make contract-fuzz)"
# shellcheck disable=SC2086 # CONTRACT_FUZZ_ARGS is a list of options
"$venv/bin/schemathesis" --config-file "$here/schemathesis.toml" run api/openapi.yaml \
  --url "$url" \
  --header "Authorization: Bearer $key" \
  --checks all \
  --seed "$seed" \
  ${CONTRACT_FUZZ_ARGS:-}
