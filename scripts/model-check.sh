#!/usr/bin/env bash
# scripts/model-check.sh SUITE...
#
# Model-checks the idempotency protocol with spin: the charge's
# (model/payment.pml), the refund's (model/refund.pml), a saga's step and
# its compensation (model/saga.pml) and the captures and voids of an
# authorized payment (model/twostep.pml). Every
# run is exhaustive within the bounds its flags set (no bitstate hashing): a
# run that does not finish its search fails, like one that finds a violation.
#
# Suites:
#   checks       the real checks: safety per scenario, liveness with weak
#                fairness; each must pass (make model)
#   witnesses    events each check must be able to reach, so that a passing
#                check is not vacuous; each must be reached (make model)
#   mutants      every mutant below; each must produce its counterexample
#                (make model-mutants)
#   nofence | findsave | delunknown | noorderidx | nolease | nolookup |
#   busyasnone | nosettle | nowait | hooknofence | hookfinal | hooknodedup |
#   unboundguess | notifyguess
#                one mutant (make model-mutant-<name>)
#   deep         larger bounds, minutes each; not run by CI (make model-deep)
#   refund-checks, refund-witnesses, refund-mutants, refund-deep
#                the same for the refund's model (make model and make
#                model-mutants run them too)
#   refund-checkthenact | refund-newkey | refund-nofence | refund-nocommand |
#   refund-delunknown | refund-nolease | refund-nowait
#                one mutant of the refund's model (make model-mutant-<name>)
#   saga-checks, saga-witnesses, saga-mutants
#                the saga step and its compensation (model/saga.pml; make
#                model and make model-mutants run them too)
#   saga-notombstone | saga-nowait
#                one mutant of the saga's model (make model-mutant-<name>)
#   twostep-checks, twostep-witnesses, twostep-mutants
#                the captures and voids of an authorized payment
#                (model/twostep.pml; make model and make model-mutants)
#   twostep-noindex | twostep-statefirst
#                its mutants (make model-mutant-twostep-<name>)
#
# Environment (optional):
#   MODEL_MEMLIM   MB one verifier may use   (default 2048)
#   MODEL_TIMEOUT  seconds one verifier may run (default 900)
#   SPIN, CC       the spin and C compiler to use (default spin, gcc)
#
# Every run prints one line: name, result, states stored, transitions, depth,
# seconds, MB. A counterexample (mutants, witnesses) is replayed and its
# narration printed: the model's printf lines, one per step.
set -Eeuo pipefail
cd "$(dirname "$0")/.."

SPIN="${SPIN:-spin}"
CC="${CC:-gcc}"
MEMLIM="${MODEL_MEMLIM:-2048}"
TIMEOUT="${MODEL_TIMEOUT:-900}"
# The model the runs below check; the refund suites set their own (local,
# so it holds for the runs they make).
MODEL="model/payment.pml"

command -v "$SPIN" >/dev/null || { echo "model-check: $SPIN not found (Debian: apt-get install spin)" >&2; exit 1; }
command -v "$CC" >/dev/null || { echo "model-check: $CC not found" >&2; exit 1; }

# spin and pan write their files (pan.c, pan, trails) into the current
# directory; each run gets its own directory under one temp dir.
work="$(mktemp -d "${TMPDIR:-/tmp}/model-check.XXXXXX")"
trap 'rm -rf "$work"' EXIT

failures=0
runs=0
start_all=$(date +%s)

# run NAME MODE EXPECT FLAGS...
#   MODE    safety  assertions and invalid end states, depth-first
#           live    the LTL formula 'live' with weak fairness (pan -a -f)
#           bfs     as safety, breadth-first: the shortest counterexample
#   EXPECT  pass, or violation:REGEX (a run must stop on a line matching
#           REGEX, e.g. "VIOLATED P4" or "WITNESS 3 reached")
run() {
	local name="$1" mode="$2" expect="$3"; shift 3
	local flags=("$@")
	local dir="$work/$name" pml
	pml="$(basename "$MODEL")"
	mkdir -p "$dir"
	# the model and the core it includes (model/core*.pml)
	cp "$MODEL" "$(dirname "$MODEL")"/core*.pml "$dir/"
	runs=$((runs + 1))

	# A run that expects a counterexample searches little: compiling pan.c
	# fast matters more than running it fast (-O0 compiles ~8x faster).
	local opt=-O1
	[ "$expect" = pass ] || opt=-O0
	local cflags=("$opt" -DMEMLIM="$MEMLIM" -w) panflags=()
	case "$mode" in
	safety) cflags+=(-DSAFETY -DCOLLAPSE); panflags=(-m400000 -w24) ;;
	bfs)    cflags+=(-DSAFETY -DBFS);      panflags=(-w24) ;;
	live)   cflags+=(-DCOLLAPSE -DNFAIR=3); panflags=(-a -f -m1000000 -w24); flags+=(-DLIVENESS) ;;
	*) echo "model-check: unknown mode $mode" >&2; exit 2 ;;
	esac

	local t0 t1 rc=0
	t0=$(date +%s.%N)
	if ! (cd "$dir" && "$SPIN" -a "${flags[@]}" "$pml" >spin.log 2>&1); then
		echo "FAIL $name: spin -a ${flags[*]} failed:"; sed 's/^/    /' "$dir/spin.log"
		failures=$((failures + 1)); return
	fi
	if ! (cd "$dir" && "$CC" "${cflags[@]}" -o pan pan.c >cc.log 2>&1); then
		echo "FAIL $name: $CC failed:"; sed 's/^/    /' "$dir/cc.log"
		failures=$((failures + 1)); return
	fi
	(cd "$dir" && timeout "$TIMEOUT" ./pan "${panflags[@]}" >pan.log 2>&1) || rc=$?
	t1=$(date +%s.%N)

	local out="$dir/pan.log"
	local errors states trans depth mem secs
	errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$out" | tail -1)
	states=$(awk '/states, stored/ {print $1; exit}' "$out")
	trans=$(awk '/transitions \(= / {print $1; exit}' "$out")
	depth=$(sed -n 's/.*depth reached \([0-9]*\),.*/\1/p' "$out" | tail -1)
	mem=$(awk '/total actual memory usage/ {print $1; exit}' "$out")
	secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
	local figures="states=${states:-?} transitions=${trans:-?} depth=${depth:-?} time=${secs}s mem=${mem:-?}MB"
	local incomplete=""
	if [ "$rc" -eq 124 ]; then incomplete="timed out after ${TIMEOUT}s"; fi
	if grep -q "max search depth too small" "$out"; then incomplete="max search depth too small"; fi
	if grep -q "reached -DMEMLIM bound\|out of memory" "$out"; then incomplete="memory limit ${MEMLIM} MB reached"; fi
	if [ -z "$errors" ]; then incomplete="${incomplete:-no result from pan (exit $rc)}"; fi

	if [ "$expect" = pass ]; then
		if [ -n "$incomplete" ]; then
			echo "FAIL $name: search incomplete: $incomplete ($figures)"
			failures=$((failures + 1))
		elif [ "$errors" != 0 ]; then
			echo "FAIL $name: $errors violation(s) ($figures) [${flags[*]}]"
			grep -m1 -E "assertion violated|invalid end state|acceptance cycle|non-progress" "$out" | sed 's/^/    /' || true
			(cd "$dir" && "$SPIN" -t "${flags[@]}" "$pml" 2>&1) | narrate | shorten | sed 's/^/    /'
			echo "    reproduce: cd model && $SPIN -a ${flags[*]} $pml && $CC ${cflags[*]} -o pan pan.c && ./pan ${panflags[*]} && $SPIN -t ${flags[*]} $pml"
			failures=$((failures + 1))
		else
			echo "ok   $name: $figures [${flags[*]}]"
		fi
		return
	fi

	local want="${expect#violation:}"
	if [ "${errors:-0}" = 0 ]; then
		echo "FAIL $name: expected a counterexample matching '$want', got none${incomplete:+ ($incomplete)} ($figures) [${flags[*]}]"
		failures=$((failures + 1))
		return
	fi
	# The whole narration is searched (a liveness trail can be long before
	# its cycle starts); 40 lines of it are printed.
	local whole story
	whole="$(cd "$dir" && "$SPIN" -t "${flags[@]}" "$pml" 2>&1 | narrate)"
	story="$(shorten <<<"$whole")"
	if grep -qE "$want" <<<"$whole"; then
		echo "ok   $name: counterexample as expected ($figures) [${flags[*]}]"
		sed 's/^/    /' <<<"$story"
	else
		echo "FAIL $name: a counterexample, but not '$want' ($figures) [${flags[*]}]"
		grep -m1 -E "assertion violated|invalid end state|acceptance cycle" "$out" | sed 's/^/    /' || true
		sed 's/^/    /' <<<"$story"
		failures=$((failures + 1))
	fi
}

# The model's own narration of a replayed trail: one line per printf.
narrate() {
	{ grep -E '^\s+(T[0-9]|provider|webhook|a replica|the lock|the TTL|the bound|the expiry|VIOLATED|WITNESS)|START OF CYCLE' || true; } |
		sed 's/^[[:space:]]*//'
}

# At most 40 lines of a narration: a liveness counterexample's cycle repeats
# itself.
shorten() {
	awk 'NR <= 40 {print} END {if (NR > 40) printf "... %d more lines\n", NR - 40}'
}

# Scenarios (model/payment.pml): 1 one key, the same request twice; 2 one
# order, a second key with a second external payment; 3 one external payment
# under three keys, one with another amount; 4 one key reused for another
# payment. The completer runs in every scenario. Defaults: MAXFAULTS=2,
# MAXATT=2, each fault kind at most once, one TTL purge.
suite_checks() {
	run safety-key    safety pass -DSCEN=1
	run safety-order  safety pass -DSCEN=2
	run safety-ext    safety pass -DSCEN=3 -DMAXFAULTS=1 -DMAXATT=1
	run safety-reuse  safety pass -DSCEN=4
	run live-key      live   pass -DSCEN=1 -DMAXFAULTS=1
	run live-order    live   pass -DSCEN=2 -DMAXFAULTS=1
	run live-ext      live   pass -DSCEN=3 -DMAXFAULTS=0
	run live-reuse    live   pass -DSCEN=4 -DMAXFAULTS=1
	# a refusal for good after a crash or a lost answer; every retry is
	# refused, and each request still gets a final answer
	run live-refused  live   pass -DSCEN=1 -DMAXDBFAIL=0 -DMAXSLOW=0 -DMAXDNC=0
	# a provider whose refusal for good answers the refused request only:
	# FAILED after a resumed refusal rests on the bound B (the wait)
	run safety-refuseonce safety pass -DSCEN=1 -DREFUSEONCE
	run live-refuseonce   live   pass -DSCEN=1 -DREFUSEONCE -DMAXCRASH=0 -DMAXDBFAIL=0 -DMAXDNC=0 -DMAXLOST=0
	# the wait for B whose lock ends first: a refusal for good, a failed
	# phase 3 (so that a takeover resumes) and the waiter's slow lock
	run safety-wait       safety pass -DSCEN=1 -DMAXFAULTS=3 -DMAXCRASH=0 -DMAXLOST=0 -DMAXDNC=0
	run live-wait         live   pass -DSCEN=1 -DMAXFAULTS=3 -DMAXCRASH=0 -DMAXLOST=0 -DMAXDNC=0
	# the provider's events (webhooks) as a second writer; one fault for
	# one key, none for two payments of the order (two events)
	run safety-webhook-key   safety pass -DSCEN=1 -DWEBHOOK -DMAXFAULTS=1
	run safety-webhook-order safety pass -DSCEN=2 -DWEBHOOK -DMAXFAULTS=0
	run live-webhook-key     live   pass -DSCEN=1 -DWEBHOOK -DMAXFAULTS=0
	# the other kinds of provider (PKIND; docs/model.md, "The provider
	# kinds"): a lookup without a request bound, whose refusal answers its
	# own request only, so an earlier request may land after the lookup
	# found nothing; no lookup at all
	run safety-unbounded     safety pass -DSCEN=1 -DPKIND=2 -DREFUSEONCE
	run safety-notify        safety pass -DSCEN=1 -DPKIND=3
	# an unknown outcome ends only when a retry gets a decision: with a
	# refusal that answers its own request only
	run live-unbounded       live   pass -DSCEN=1 -DPKIND=2 -DREFUSEONCE -DMAXCRASH=0 -DMAXDBFAIL=0 -DMAXDNC=0
	run live-notify          live   pass -DSCEN=1 -DPKIND=3 -DREFUSEONCE -DMAXCRASH=0 -DMAXDBFAIL=0 -DMAXDNC=0
}

# Each witness stops the first time its event happens (SEEN(n) in the model).
suite_witnesses() {
	run witness-01-takeover-resumes        safety "violation:WITNESS 1 reached"  -DSCEN=1 -DWITNESS=1
	run witness-02-completer-records       safety "violation:WITNESS 2 reached"  -DSCEN=1 -DWITNESS=2
	run witness-03-late-completion-fenced  safety "violation:WITNESS 3 reached"  -DSCEN=1 -DWITNESS=3
	run witness-04-release-nothing-charged safety "violation:WITNESS 4 reached"  -DSCEN=1 -DWITNESS=4
	run witness-05-early-lock-release      safety "violation:WITNESS 5 reached"  -DSCEN=1 -DWITNESS=5
	run witness-06-replay                  safety "violation:WITNESS 6 reached"  -DSCEN=1 -DWITNESS=6
	run witness-07-order-already-paid      safety "violation:WITNESS 7 reached"  -DSCEN=2 -DWITNESS=7
	run witness-08-new-payment-after-decline safety "violation:WITNESS 8 reached" -DSCEN=2 -DWITNESS=8
	run witness-09-external-payment-conflict safety "violation:WITNESS 9 reached" -DSCEN=3 -DWITNESS=9
	run witness-10-existing-payment-200    safety "violation:WITNESS 10 reached" -DSCEN=3 -DWITNESS=10
	run witness-11-purge-completed         safety "violation:WITNESS 11 reached" -DSCEN=1 -DWITNESS=11
	run witness-13-phase3-db-failure       safety "violation:WITNESS 13 reached" -DSCEN=1 -DWITNESS=13
	run witness-14-release-fenced          safety "violation:WITNESS 14 reached" -DSCEN=1 -DWITNESS=14
	run witness-17-refused-fresh-failed    safety "violation:WITNESS 17 reached" -DSCEN=1 -DWITNESS=17
	run witness-18-lookup-finds-decision   safety "violation:WITNESS 18 reached" -DSCEN=1 -DWITNESS=18
	run witness-19-lookup-none-failed      safety "violation:WITNESS 19 reached" -DSCEN=1 -DWITNESS=19
	run witness-20-lookup-processing       safety "violation:WITNESS 20 reached" -DSCEN=1 -DWITNESS=20
	run witness-21-new-payment-after-failed safety "violation:WITNESS 21 reached" -DSCEN=2 -DWITNESS=21
	run witness-22-webhook-records         safety "violation:WITNESS 22 reached" -DSCEN=1 -DWEBHOOK -DWITNESS=22
	run witness-23-fenced-out-by-webhook   safety "violation:WITNESS 23 reached" -DSCEN=1 -DWEBHOOK -DWITNESS=23
	run witness-24-webhook-duplicate       safety "violation:WITNESS 24 reached" -DSCEN=1 -DWEBHOOK -DWITNESS=24
	run witness-25-webhook-reads-again     safety "violation:WITNESS 25 reached" -DSCEN=1 -DWEBHOOK -DWITNESS=25
	run witness-26-webhook-agrees          safety "violation:WITNESS 26 reached" -DSCEN=1 -DWEBHOOK -DWITNESS=26
	run witness-27-late-call-too-old       safety "violation:WITNESS 27 reached" -DSCEN=1 -DWITNESS=27
	run witness-28-wait-finds-late-charge  safety "violation:WITNESS 28 reached" -DSCEN=1 -DREFUSEONCE -DWITNESS=28 \
		-DMAXCRASH=0 -DMAXLOST=0 -DMAXDNC=0 -DMAXDBFAIL=0
	run witness-29-wait-then-failed        safety "violation:WITNESS 29 reached" -DSCEN=1 -DWITNESS=29
	run witness-30-lock-ends-before-bound  safety "violation:WITNESS 30 reached" -DSCEN=1 -DWITNESS=30 -DMAXFAULTS=3 \
		-DMAXCRASH=0 -DMAXLOST=0 -DMAXDNC=0
	# the other kinds of provider, with their checks' flags; breadth-first,
	# since a depth-first search goes 2.7 million states deep before it
	# finds 31 with REFUSEONCE
	run witness-31-unbounded-nothing-kept  bfs    "violation:WITNESS 31 reached" -DSCEN=1 -DPKIND=2 -DREFUSEONCE -DWITNESS=31
	run witness-32-notify-not-asked        safety "violation:WITNESS 32 reached" -DSCEN=1 -DPKIND=3 -DWITNESS=32
}

# Each mutant must violate the named property; the second run of a mutant
# switches its first property off to show what it breaks next. Runs whose
# story needs only some kinds of fault switch the others off: a
# breadth-first search stores every state up to the counterexample's depth.
suite_nofence() {
	run mutant-nofence            bfs "violation:VIOLATED P4" -DSCEN=1 -DNOFENCE
	run mutant-nofence-money      bfs "violation:VIOLATED P2" -DSCEN=1 -DNOFENCE -DSKIP_P4 -DSKIP_P6 -DMAXATT=1 -DMAXREFUSE=0 \
		-DMAXCRASH=0 -DMAXLOST=0 -DMAXDBFAIL=0
	run mutant-nofence-failed     bfs "violation:VIOLATED P8" -DSCEN=1 -DNOFENCE -DSKIP_P4 -DSKIP_P6 -DMAXATT=1
}
suite_findsave() {
	run mutant-findsave           bfs "violation:VIOLATED P3" -DSCEN=1 -DFINDSAVE
	run mutant-findsave-next      bfs "violation:VIOLATED P5" -DSCEN=1 -DFINDSAVE -DSKIP_P3
}
suite_delunknown() {
	run mutant-delunknown         bfs "violation:VIOLATED P6" -DSCEN=1 -DDELUNKNOWN
	run mutant-delunknown-money   bfs "violation:VIOLATED P2" -DSCEN=1 -DDELUNKNOWN -DSKIP_P6 -DMAXATT=1
	run mutant-delunknown-amount  bfs "violation:WITNESS 16 reached" -DSCEN=3 -DDELUNKNOWN -DSKIP_P6 -DWITNESS=16 -DMAXATT=1 -DMAXREFUSE=0 \
		-DMAXCRASH=0 -DMAXSLOW=0 -DMAXDNC=0 -DMAXDBFAIL=0
}
suite_noorderidx() {
	run mutant-noorderidx         bfs "violation:VIOLATED P1" -DSCEN=2 -DNOORDERIDX
}
suite_nolease() {
	run mutant-nolease            live "violation:START OF CYCLE" -DSCEN=1 -DNOLEASE -DMAXFAULTS=1
}
suite_nolookup() {
	run mutant-nolookup           bfs "violation:VIOLATED P8" -DSCEN=1 -DNOLOOKUP -DMAXSLOW=0 -DMAXCRASH=0
}
suite_busyasnone() {
	run mutant-busyasnone         bfs "violation:VIOLATED P6" -DSCEN=1 -DBUSYASNONE -DMAXCRASH=0 -DMAXLOST=0 -DMAXDNC=0 -DMAXDBFAIL=0
	run mutant-busyasnone-money   bfs "violation:VIOLATED P8" -DSCEN=1 -DBUSYASNONE -DSKIP_P6 -DMAXCRASH=0 -DMAXLOST=0 -DMAXDNC=0 \
		-DMAXDBFAIL=0
}
suite_nosettle() {
	run mutant-nosettle           live "violation:START OF CYCLE" -DSCEN=1 -DNOSETTLE -DMAXLOST=0 -DMAXDBFAIL=0 -DMAXSLOW=0 -DMAXDNC=0
}
# The earlier rule, with a provider whose refusal for good answers the
# refused request only: FAILED as soon as the lookup finds nothing is untrue
# (P6) while a slow earlier owner's request is processed, and the key is
# then charged (P8).
suite_nowait() {
	run mutant-nowait-answer      bfs "violation:VIOLATED P6" -DSCEN=1 -DREFUSEONCE -DNOWAIT -DMAXCRASH=0 -DMAXLOST=0 -DMAXDNC=0 \
		-DMAXDBFAIL=0
	run mutant-nowait             bfs "violation:VIOLATED P8" -DSCEN=1 -DREFUSEONCE -DNOWAIT -DSKIP_P6 -DMAXCRASH=0 -DMAXLOST=0 \
		-DMAXDNC=0 -DMAXDBFAIL=0
}
# The provider's events (WEBHOOK): the event's record without the claim's
# fence; an event applied whatever the payment's status; no processed_event.
suite_hooknofence() {
	run mutant-hooknofence        bfs "violation:VIOLATED P4" -DSCEN=1 -DWEBHOOK -DHOOKNOFENCE
}
# HOOKFINAL has no fence either, so P4 falls first: it runs without P4.
suite_hookfinal() {
	run mutant-hookfinal          bfs "violation:VIOLATED P15" -DSCEN=1 -DWEBHOOK -DHOOKFINAL -DSKIP_P4
	run mutant-hookfinal-record   bfs "violation:VIOLATED P3" -DSCEN=1 -DWEBHOOK -DHOOKFINAL -DSKIP_P4 -DSKIP_P15
}
suite_hooknodedup() {
	run mutant-hooknodedup        bfs "violation:VIOLATED P14" -DSCEN=1 -DWEBHOOK -DHOOKNODEDUP
}
# A guess per kind of provider (PKIND), each what the kind cannot prove.
# Without a request bound, the rule that is right at a provider with one
# (the wait, then FAILED on nothing found): an earlier request lands after
# the wait and charges a FAILED payment (P8); FAILED at once (NOWAIT) the
# same, sooner. With a refusal for good that binds every later request the
# late request would be refused too, so it runs with REFUSEONCE, as NOWAIT
# does.
suite_unboundguess() {
	run mutant-unboundguess       bfs "violation:VIOLATED P8" -DSCEN=1 -DPKIND=2 -DUNBOUNDGUESS -DREFUSEONCE -DSKIP_P6 \
		-DMAXCRASH=0 -DMAXLOST=0 -DMAXDNC=0 -DMAXDBFAIL=0
	run mutant-unboundguess-atonce bfs "violation:VIOLATED P8" -DSCEN=1 -DPKIND=2 -DUNBOUNDGUESS -DNOWAIT -DREFUSEONCE \
		-DSKIP_P6 -DMAXCRASH=0 -DMAXLOST=0 -DMAXDNC=0 -DMAXDBFAIL=0
}
# Without a lookup, a resumed refusal for good taken as FAILED: the charge
# an earlier attempt made, whose answer was lost, is recorded FAILED (P8).
suite_notifyguess() {
	run mutant-notifyguess        bfs "violation:VIOLATED P8" -DSCEN=1 -DPKIND=3 -DNOTIFYGUESS -DMAXSLOW=0 -DMAXCRASH=0
}
suite_mutants() {
	suite_nofence; suite_findsave; suite_delunknown; suite_noorderidx; suite_nolease
	suite_nolookup; suite_busyasnone; suite_nosettle; suite_nowait
	suite_hooknofence; suite_hookfinal; suite_hooknodedup
	suite_unboundguess; suite_notifyguess
}

# Larger bounds; each run takes minutes and up to MODEL_MEMLIM. Witnesses 12
# and 15 (the completer deleting a claim without a payment; a takeover that
# finds a final payment) are expected to be unreachable: their runs pass.
suite_deep() {
	run deep-safety-key        safety pass -DSCEN=1 -DMAXFAULTS=3 -DMAXATT=2
	run deep-safety-order      safety pass -DSCEN=2 -DMAXFAULTS=3 -DMAXATT=1
	run deep-safety-ext        safety pass -DSCEN=3 -DMAXFAULTS=2 -DMAXATT=1
	run deep-safety-reuse      safety pass -DSCEN=4 -DMAXFAULTS=3 -DMAXATT=2
	run deep-live-key          live   pass -DSCEN=1 -DMAXFAULTS=2
	run deep-live-order        live   pass -DSCEN=2 -DMAXFAULTS=2
	run deep-unreachable-12    safety pass -DSCEN=1 -DWITNESS=12
	run deep-unreachable-15    safety pass -DSCEN=1 -DWITNESS=15
	# the provider's events with two faults: more than 34 million states,
	# more than 2 GB (MODEL_MEMLIM=4096 or more); not measured to the end
	run deep-safety-webhook-key safety pass -DSCEN=1 -DWEBHOOK
	# the liveness of the other kinds of provider with every kind of fault
	run deep-live-unbounded    live   pass -DSCEN=1 -DPKIND=2 -DREFUSEONCE
	run deep-live-notify       live   pass -DSCEN=1 -DPKIND=3 -DREFUSEONCE
}

# The refund's model (model/refund.pml; docs/model.md, "Refunds"). One
# payment charged 2; scenarios: 1 two refunds (K0, X0, 1) and (K1, X1, 2)
# that fit alone and together exceed the charge; 2 one refund (X0, 1) under
# two keys; 3 one key, the same refund request twice. The completer runs in
# every scenario. Defaults as for the charge: MAXFAULTS=2, MAXATT=2, each
# fault kind at most once, one TTL purge.
suite_refund-checks() {
	local MODEL=model/refund.pml
	run refund-safety-over   safety pass -DSCEN=1
	# scenarios 2 and 3 are about concurrency, not retries: one attempt per
	# client (the completer still retries each key); two in make model-deep
	run refund-safety-keys   safety pass -DSCEN=2 -DMAXATT=1
	run refund-safety-dup    safety pass -DSCEN=3 -DMAXATT=1
	run refund-live-over     live   pass -DSCEN=1 -DMAXFAULTS=1
	# a provider whose refusal for good answers the refused request only:
	# FAILED after a resumed refusal rests on the bound B (the wait)
	run refund-safety-refuseonce safety pass -DSCEN=3 -DMAXATT=1 -DREFUSEONCE
	run refund-live-refuseonce   live   pass -DSCEN=3 -DREFUSEONCE -DMAXCRASH=0 -DMAXDBFAIL=0 -DMAXDNC=0 -DMAXLOST=0
	# the other kinds of provider (PKIND), as for the charge
	run refund-safety-unbounded  safety pass -DSCEN=3 -DMAXATT=1 -DPKIND=2 -DREFUSEONCE
	run refund-safety-notify     safety pass -DSCEN=3 -DMAXATT=1 -DPKIND=3
}

suite_refund-witnesses() {
	local MODEL=model/refund.pml
	run refund-witness-01-takeover-resumes      safety "violation:WITNESS 1 reached"  -DSCEN=1 -DWITNESS=1
	run refund-witness-02-completer-records     safety "violation:WITNESS 2 reached"  -DSCEN=1 -DWITNESS=2
	run refund-witness-03-late-record-fenced    safety "violation:WITNESS 3 reached"  -DSCEN=1 -DWITNESS=3
	run refund-witness-04-release-gives-back    safety "violation:WITNESS 4 reached"  -DSCEN=1 -DWITNESS=4
	run refund-witness-05-unknown-keeps-reserved safety "violation:WITNESS 5 reached" -DSCEN=1 -DWITNESS=5
	run refund-witness-06-replay                safety "violation:WITNESS 6 reached"  -DSCEN=1 -DWITNESS=6
	run refund-witness-07-exceeds-payment       safety "violation:WITNESS 7 reached"  -DSCEN=1 -DWITNESS=7
	run refund-witness-08-decline-makes-room    safety "violation:WITNESS 8 reached"  -DSCEN=1 -DWITNESS=8
	run refund-witness-09-second-layer-200      safety "violation:WITNESS 9 reached"  -DSCEN=2 -DWITNESS=9
	run refund-witness-10-second-layer-pending  safety "violation:WITNESS 10 reached" -DSCEN=2 -DWITNESS=10
	run refund-witness-11-refused-fresh-failed  safety "violation:WITNESS 11 reached" -DSCEN=1 -DWITNESS=11
	run refund-witness-12-lookup-settles        safety "violation:WITNESS 12 reached" -DSCEN=1 -DWITNESS=12
	run refund-witness-18-fenced-out-replays    safety "violation:WITNESS 18 reached" -DSCEN=1 -DWITNESS=18
	run refund-witness-19-late-call-too-old     safety "violation:WITNESS 19 reached" -DSCEN=3 -DWITNESS=19
	run refund-witness-20-lookup-none-failed    safety "violation:WITNESS 20 reached" -DSCEN=3 -DWITNESS=20
	run refund-witness-21-wait-finds-late-refund safety "violation:WITNESS 21 reached" -DSCEN=3 -DREFUSEONCE -DWITNESS=21 \
		-DMAXCRASH=0 -DMAXLOST=0 -DMAXDNC=0 -DMAXDBFAIL=0
	run refund-witness-22-wait-then-failed      safety "violation:WITNESS 22 reached" -DSCEN=3 -DWITNESS=22
	run refund-witness-23-lock-ends-before-bound safety "violation:WITNESS 23 reached" -DSCEN=3 -DWITNESS=23 -DMAXFAULTS=3 \
		-DMAXCRASH=0 -DMAXLOST=0 -DMAXDNC=0
	run refund-witness-24-unbounded-nothing-kept bfs   "violation:WITNESS 24 reached" -DSCEN=3 -DPKIND=2 -DREFUSEONCE -DWITNESS=24
	run refund-witness-25-notify-not-asked      safety "violation:WITNESS 25 reached" -DSCEN=3 -DPKIND=3 -DWITNESS=25
}

suite_refund-checkthenact() {
	local MODEL=model/refund.pml
	run refund-mutant-checkthenact bfs "violation:VIOLATED P9" -DSCEN=1 -DCHECKTHENACT
}
suite_refund-newkey() {
	local MODEL=model/refund.pml
	run refund-mutant-newkey       bfs "violation:VIOLATED P10" -DSCEN=1 -DNEWKEY -DMAXCRASH=0 -DMAXSLOW=0 -DMAXDNC=0 \
		-DMAXREFUSE=0 -DMAXDBFAIL=0
}
suite_refund-nofence() {
	local MODEL=model/refund.pml
	run refund-mutant-nofence      bfs "violation:VIOLATED P12" -DSCEN=1 -DNOFENCE
	run refund-mutant-nofence-lost bfs "violation:VIOLATED P11" -DSCEN=1 -DNOFENCE -DSKIP_P12 -DMAXATT=1 -DMAXCRASH=0 \
		-DMAXLOST=0 -DMAXREFUSE=0 -DMAXDBFAIL=0
}
suite_refund-nocommand() {
	local MODEL=model/refund.pml
	run refund-mutant-nocommand    bfs "violation:VIOLATED P11" -DSCEN=1 -DNOCOMMAND -DMAXATT=1 -DMAXCRASH=0 -DMAXLOST=0 \
		-DMAXDNC=0 -DMAXREFUSE=0 -DMAXDBFAIL=0
}
suite_refund-delunknown() {
	local MODEL=model/refund.pml
	run refund-mutant-delunknown       bfs "violation:VIOLATED P12" -DSCEN=1 -DDELUNKNOWN
	run refund-mutant-delunknown-lost  bfs "violation:VIOLATED P11" -DSCEN=1 -DDELUNKNOWN -DSKIP_P12 -DMAXATT=1 \
		-DMAXCRASH=0 -DMAXSLOW=0 -DMAXDNC=0 -DMAXREFUSE=0 -DMAXDBFAIL=0
}
suite_refund-nolease() {
	local MODEL=model/refund.pml
	run refund-mutant-nolease      live "violation:START OF CYCLE" -DSCEN=1 -DNOLEASE -DMAXFAULTS=1
}
suite_refund-nowait() {
	local MODEL=model/refund.pml
	run refund-mutant-nowait       bfs "violation:VIOLATED P12" -DSCEN=3 -DREFUSEONCE -DNOWAIT -DMAXCRASH=0 -DMAXLOST=0 -DMAXDNC=0 \
		-DMAXDBFAIL=0
	run refund-mutant-nowait-lost  bfs "violation:VIOLATED P11" -DSCEN=3 -DREFUSEONCE -DNOWAIT -DSKIP_P12 -DMAXATT=1 \
		-DMAXCRASH=0 -DMAXLOST=0 -DMAXDNC=0 -DMAXDBFAIL=0
}
suite_refund-mutants() {
	suite_refund-checkthenact; suite_refund-newkey; suite_refund-nofence; suite_refund-nocommand
	suite_refund-delunknown; suite_refund-nolease; suite_refund-nowait
}

# Larger bounds for the refund's model. Witnesses 15, 16 and 17 (the
# completer deleting a refund's record that has no refund; a takeover that
# finds its refund final; the provider refusing a refund beyond the charge)
# are expected to be unreachable: their runs pass.
suite_refund-deep() {
	local MODEL=model/refund.pml
	run refund-deep-safety-over  safety pass -DSCEN=1 -DMAXFAULTS=3
	run refund-deep-safety-keys  safety pass -DSCEN=2 -DMAXFAULTS=3
	run refund-deep-safety-dup   safety pass -DSCEN=3 -DMAXFAULTS=3
	run refund-deep-live-keys    live   pass -DSCEN=2 -DMAXFAULTS=2
	run refund-deep-live-dup     live   pass -DSCEN=3 -DMAXFAULTS=1
	run refund-deep-live-over    live   pass -DSCEN=1 -DMAXFAULTS=2
	run refund-deep-unreachable-15 safety pass -DSCEN=1 -DWITNESS=15
	run refund-deep-unreachable-16 safety pass -DSCEN=1 -DWITNESS=16
	run refund-deep-unreachable-17 safety pass -DSCEN=1 -DWITNESS=17
}

# A saga's payment step and its compensation (model/saga.pml; docs/model.md,
# "Saga steps"): the step and the compensation delivered twice each, in any
# order and at once, with one crash and one lost provider answer, the
# completer and its run of waiting compensations. Invariants P16, P17, P19
# are checked in every state, P18 at every reply published.
suite_saga-checks() {
	local MODEL=model/saga.pml
	run saga-safety            safety pass
	# one delivery each, two crashes: the step's and the compensation's
	# attempts each die once
	run saga-safety-crashes    safety pass -DNCHG=1 -DNCMP=1 -DMAXCRASH=2
	# the step three times, racing one compensation
	run saga-safety-steps      safety pass -DNCHG=3 -DNCMP=1
}

suite_saga-witnesses() {
	local MODEL=model/saga.pml
	run saga-witness-01-tombstone           safety "violation:WITNESS 1 reached"  -DWITNESS=1
	run saga-witness-02-late-step-cancelled safety "violation:WITNESS 2 reached"  -DWITNESS=2
	run saga-witness-03-tombstone-race      safety "violation:WITNESS 3 reached"  -DWITNESS=3
	run saga-witness-04-waits-for-step      safety "violation:WITNESS 4 reached"  -DWITNESS=4
	run saga-witness-05-waited-refunds      safety "violation:WITNESS 5 reached"  -DWITNESS=5
	run saga-witness-06-refunded            safety "violation:WITNESS 6 reached"  -DWITNESS=6
	run saga-witness-07-declined-zero       safety "violation:WITNESS 7 reached"  -DWITNESS=7
	run saga-witness-08-step-replay         safety "violation:WITNESS 8 reached"  -DWITNESS=8
	run saga-witness-09-compensation-replay safety "violation:WITNESS 9 reached"  -DWITNESS=9
	run saga-witness-10-completer-settles   safety "violation:WITNESS 10 reached" -DWITNESS=10
	run saga-witness-11-claimed-no-wait     safety "violation:WITNESS 11 reached" -DWITNESS=11
	run saga-witness-12-step-held           safety "violation:WITNESS 12 reached" -DWITNESS=12
}

suite_saga-notombstone() {
	local MODEL=model/saga.pml
	run saga-mutant-notombstone bfs "violation:VIOLATED P16" -DNOTOMBSTONE
}
suite_saga-nowait() {
	local MODEL=model/saga.pml
	run saga-mutant-nowait      bfs "violation:VIOLATED P16" -DNOWAIT
}
suite_saga-mutants() {
	suite_saga-notombstone; suite_saga-nowait
}

# The captures and voids of an authorized payment (model/twostep.pml;
# docs/model.md, "Two-step payments"). Scenarios: 1 a capture of the whole
# amount racing a void; 2 two captures that together exceed the
# authorization; 3 a partial capture racing two voids under two keys; 4 the
# same capture sent twice at once under one key. One
# fault of each kind (crash, lost answer, refusal for now, decline, the
# hold's lapse), the completer and the expiry job in every scenario.
suite_twostep-checks() {
	local MODEL=model/twostep.pml
	run twostep-safety-capture-void safety pass -DSCEN=1
	run twostep-safety-captures     safety pass -DSCEN=2
	run twostep-safety-three        safety pass -DSCEN=3 -DMAXATT=1
	run twostep-safety-same-key     safety pass -DSCEN=4
}

suite_twostep-witnesses() {
	local MODEL=model/twostep.pml
	run twostep-witness-01-captured       safety "violation:WITNESS 1 reached"  -DSCEN=1 -DWITNESS=1
	run twostep-witness-02-voided         safety "violation:WITNESS 2 reached"  -DSCEN=1 -DWITNESS=2
	run twostep-witness-03-loser-waits    safety "violation:WITNESS 3 reached"  -DSCEN=1 -DWITNESS=3
	run twostep-witness-04-loser-final    safety "violation:WITNESS 4 reached"  -DSCEN=1 -DWITNESS=4
	run twostep-witness-05-lookup-settles safety "violation:WITNESS 5 reached"  -DSCEN=1 -DWITNESS=5
	run twostep-witness-06-unknown-kept   safety "violation:WITNESS 6 reached"  -DSCEN=1 -DWITNESS=6
	run twostep-witness-07-completer      safety "violation:WITNESS 7 reached"  -DSCEN=1 -DWITNESS=7
	run twostep-witness-08-released       safety "violation:WITNESS 8 reached"  -DSCEN=1 -DWITNESS=8
	run twostep-witness-09-after-decline  safety "violation:WITNESS 9 reached"  -DSCEN=1 -DWITNESS=9
	run twostep-witness-10-expired        safety "violation:WITNESS 10 reached" -DSCEN=1 -DWITNESS=10
	run twostep-witness-11-lapse-failed   safety "violation:WITNESS 11 reached" -DSCEN=1 -DWITNESS=11
	run twostep-witness-12-replay         safety "violation:WITNESS 12 reached" -DSCEN=1 -DWITNESS=12
	run twostep-witness-13-expire-blocked safety "violation:WITNESS 13 reached" -DSCEN=1 -DWITNESS=13
	run twostep-witness-04-three-loser-final safety "violation:WITNESS 4 reached" -DSCEN=3 -DMAXATT=1 -DWITNESS=4
	run twostep-witness-14-refusal-reads-key safety "violation:WITNESS 14 reached" -DSCEN=4 -DWITNESS=14
}

# No one-winner index: two transitions PENDING at once, both asked of the
# provider. With the default provider both win (P20), two captures exceed
# the authorization (P21); with a provider that refuses the second, the
# payment has moved on while a transition is still PENDING (P22).
suite_twostep-noindex() {
	local MODEL=model/twostep.pml
	run twostep-mutant-noindex         bfs "violation:VIOLATED P20" -DSCEN=1 -DNOINDEX
	run twostep-mutant-noindex-over    bfs "violation:VIOLATED P21" -DSCEN=2 -DNOINDEX -DSKIP_P20
	run twostep-mutant-noindex-guarded bfs "violation:VIOLATED P22" -DSCEN=1 -DNOINDEX -DGUARDED
}
# The payment's state checked before the key: a refusal answered at once,
# without reading the key again. A duplicate that read the key before the
# first request's claim, and the payment after its record, is told "not
# authorized" while its own key's capture was made (P23).
suite_twostep-statefirst() {
	local MODEL=model/twostep.pml
	run twostep-mutant-statefirst      bfs "violation:VIOLATED P23" -DSCEN=4 -DSTATEFIRST
}
suite_twostep-mutants() {
	suite_twostep-noindex; suite_twostep-statefirst
}

[ $# -gt 0 ] || { sed -n '2,47p' "$0"; exit 2; }
for suite in "$@"; do
	case "$suite" in
	checks|witnesses|mutants|deep|nofence|findsave|delunknown|noorderidx|nolease|nolookup|busyasnone|nosettle|nowait|\
	hooknofence|hookfinal|hooknodedup|unboundguess|notifyguess) echo "== $suite"; "suite_$suite" ;;
	refund-checks|refund-witnesses|refund-mutants|refund-deep|refund-checkthenact|refund-newkey|refund-nofence|refund-nocommand|refund-delunknown|refund-nolease|\
	refund-nowait)
		echo "== $suite"; "suite_$suite" ;;
	saga-checks|saga-witnesses|saga-mutants|saga-notombstone|saga-nowait|\
	twostep-checks|twostep-witnesses|twostep-mutants|twostep-noindex|twostep-statefirst)
		echo "== $suite"; "suite_$suite" ;;
	*) echo "model-check: unknown suite $suite" >&2; exit 2 ;;
	esac
done

echo "model-check: $runs runs, $failures failed, $(( $(date +%s) - start_all ))s"
[ "$failures" -eq 0 ]
