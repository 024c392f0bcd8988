#!/usr/bin/env bash
# Runs each fuzz target (package:Name) for FUZZTIME and copies the inputs
# the fuzzer found interesting into the package's testdata/fuzz (commit
# them to keep them; without -fuzz, `make test` runs every target over that
# corpus). Called by `make fuzz`.
#
# One retry, for one failure only: Go 1.26's fuzzing coordinator can report
# its own -fuzztime deadline as "context deadline exceeded" when a worker is
# still busy at that instant, with no failing input (golang/go#75804, fixed in
# Go 1.27). A real failure always writes its input ("Failing input written
# to ..."), and any other failure is never retried.
set -uo pipefail
: "${FUZZTIME:?}"
GO="${GO:-go}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT

run() { # pkg name
  "$GO" test -run '^$' -fuzz "^$2\$" -fuzztime "$FUZZTIME" "$1" 2>&1 | tee "$log"
  return "${PIPESTATUS[0]}"
}

for t in "$@"; do
  pkg=${t%%:*} name=${t##*:}
  echo "== $name ($pkg, $FUZZTIME)"
  if ! run "$pkg" "$name"; then
    if grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written' "$log"; then
      echo "   $name: the coordinator's own deadline, no failing input (golang/go#75804); running it once more"
      run "$pkg" "$name" || exit 1
    else
      exit 1
    fi
  fi
  cache=$("$GO" env GOCACHE)/fuzz/$("$GO" list "$pkg")/$name
  if [ -d "$cache" ]; then
    mkdir -p "$pkg/testdata/fuzz/$name" && cp -n "$cache"/* "$pkg/testdata/fuzz/$name/" 2>/dev/null
  fi
  echo "   corpus: $(ls "$pkg/testdata/fuzz/$name" | wc -l) inputs in $pkg/testdata/fuzz/$name"
done
