//go:build fault

package fault

// Rolling deploys (docs/deploying.md): the previous release and
// this one side by side, behind the same clients, through this tree's
// migrations.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/example/payment-service/db/migrations"
	"github.com/example/payment-service/internal/kafkatest"
)

var (
	flagMixedRounds = flag.Int("mixed-rounds", 4, "TestRollingDeployMixedFleet: seeded fault rounds after each replica is rolled")
	flagUnsafeSQL   = flag.String("mixed-unsafe-sql", "", "TestRollingDeployMixedFleet: SQL run right after the migrations, "+
		"as a deliberately unsafe migration would (docs/deploying.md shows the check failing on one)")
)

// previousSchema is the last migration the previous release
// (deploy/previous-release) was deployed with: the schema its fleet runs on
// before the rollout.
const previousSchema = 12

// The previous release's completer deletes an unfinished record with
// payment_id NULL as "a charge that reserved nothing", and so does its TTL
// purge; a refund's record names its payment so that neither matches it.
// Here a refund's answer is lost (the provider refunds, too late for the
// service) and its replica is killed, so its record is abandoned with the
// lock run out; the record is aged past every TTL; then the previous
// release runs its jobs (`payment-service cleanup`, which takes no
// leadership, so no fence of leadership could stop it). It must try (its
// completer reports the record as one it cannot rebuild) and change
// nothing. Then the current release finishes the refund: one refund at the
// provider, SUCCEEDED, its event.
func TestPreviousReleaseLeavesARefundInProgressAlone(t *testing.T) {
	previous := previousRelease(t)
	s := newStack(t, stackOptions{replicas: 1})
	c := newChecker(s)
	pay := toRefund("old-jobs", 1, 7_000_001, 7)
	paid := s.pay(pay)[0]
	lost := refundOp{key: "old-jobs-refund", amount: "10.00", ext: "slow_old_jobs_refund", paid: paid}

	r0 := s.replicas[0]
	first := r0.refund(lost, 5*time.Second)
	if first.status != 503 || first.code != "outcome-unknown" {
		t.Fatalf("refund with a lost answer: %s, want 503 outcome-unknown", first)
	}
	// Before the completer's grace (1 s after the lock ran out) ends.
	r0.kill()
	var paymentID *int64
	if err := s.db.QueryRow(context.Background(), `SELECT payment_id FROM idempotency_record
		WHERE idempotency_key = $1 AND command = 'refund' AND status = 'IN_PROGRESS' AND refund_id IS NOT NULL`, lost.key).Scan(&paymentID); err != nil {
		t.Fatalf("the refund's record is not in progress with its refund: %v", err)
	}
	if paymentID == nil {
		t.Logf("the abandoned refund's record names no payment (the refunded payment is %d)", paid.id)
	} else {
		t.Logf("the abandoned refund's record names payment %d (the refunded payment is %d)", *paymentID, paid.id)
	}
	if n := s.count(`UPDATE idempotency_record SET created_at = now() - interval '5 days', locked_until = clock_timestamp() - interval '1 hour'
		WHERE idempotency_key = $1 RETURNING 1`, lost.key); n != 1 {
		t.Fatal("could not age the record")
	}
	waitFor(t, 10*time.Second, "the provider refunded", func() bool { return s.provider.RefundCounters().Refunds == 1 })

	cleanup := exec.Command(previous, "cleanup")
	cleanup.Env = append(append([]string{}, s.env...), "LOG_LEVEL=info")
	out, err := cleanup.CombinedOutput()
	if err != nil {
		t.Fatalf("the previous release's cleanup: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "does not match its payment's charge") {
		t.Errorf("the previous release's completer did not meet the refund's record:\n%s", out)
	}
	if n := s.count(`SELECT count(*) FROM idempotency_record r JOIN refund f ON f.id = r.refund_id
		WHERE r.idempotency_key = $1 AND r.status = 'IN_PROGRESS' AND f.status = 'PENDING'`, lost.key); n != 1 {
		t.Fatalf("after the previous release's cleanup the refund's record is gone or changed: its refund, made at the provider, "+
			"is left PENDING with nothing to finish it\n%s", out)
	}

	// The current release finishes it.
	must(t, r0.start())
	waitFor(t, 30*time.Second, "the current completer finished the refund", func() bool {
		return s.count(`SELECT count(*) FROM idempotency_record WHERE idempotency_key = $1 AND status = 'COMPLETED'`, lost.key) == 1
	})
	v := c.check(pay, nil)
	v = append(v, c.checkRefunds([]refundOp{lost}, []answer{first})...)
	v = append(v, c.checkGlobal()...)
	require(t, v, "after the previous release's jobs and the current completer")
}

// A command that neither release knows, as one added after this release
// (or run by a newer release beside it) writes its claim: its recovery
// point, and the payment it is about in payment_id (migration 00024's
// CHECK refuses it without one, because the previous release's completer
// and purge release any claim in progress with payment_id NULL, whatever
// its command: the code at deploy/previous-release). Its claim is
// abandoned in progress and aged past every TTL; then the previous
// release's jobs run (`payment-service cleanup`), and this release's. The
// previous release's completer meets it and leaves it (it cannot rebuild
// a charge from it); this release's completer does not list a command it
// does not know, and neither purge releases a claim with a payment. The
// record is exactly as it was.
func TestNeitherReleasesJobsTouchAFourthCommandsClaim(t *testing.T) {
	previous := previousRelease(t)
	s := newStack(t, stackOptions{})
	ctx := context.Background()
	var paymentID int64
	must(t, s.db.QueryRow(ctx, `INSERT INTO payment (client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status)
		VALUES ($1, 7000101, 7, 'sandbox', 'pi_payout_of', 10, 'RUB', 'SUCCEEDED') RETURNING id`, clientID).Scan(&paymentID))
	_, err := s.db.Exec(ctx, `INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until,
			recovery_point, payment_id, created_at)
		VALUES ($1, 'payout-abandoned', 'payout', 'h', 'IN_PROGRESS', gen_random_uuid(), clock_timestamp() - interval '1 hour',
			41, $2, now() - interval '5 days')`, clientID, paymentID)
	must(t, err)
	record := func() string {
		t.Helper()
		var row string
		must(t, s.db.QueryRow(ctx, `SELECT coalesce((SELECT row_to_json(r)::text FROM idempotency_record r WHERE idempotency_key = 'payout-abandoned'), '')`).Scan(&row))
		return row
	}
	before := record()
	for _, release := range []struct{ name, bin, meets string }{
		{"the previous release", previous, "does not match its payment's charge"},
		{"this release", binary, ""},
	} {
		cleanup := exec.Command(release.bin, "cleanup")
		cleanup.Env = append(append([]string{}, s.env...), "LOG_LEVEL=info")
		out, err := cleanup.CombinedOutput()
		if err != nil {
			t.Fatalf("%s's cleanup: %v\n%s", release.name, err, out)
		}
		if release.meets != "" && !strings.Contains(string(out), release.meets) {
			t.Errorf("%s's completer did not meet the claim:\n%s", release.name, out)
		}
		if after := record(); after != before {
			t.Fatalf("after %s's cleanup the fourth command's claim, whose reservation may have reached the provider, is gone or changed:\n before %s\n after  %s\n%s",
				release.name, before, after, out)
		}
	}
}

// A rolling deploy under load with faults: three replicas of the previous
// release on its schema, charged by the careful clients with kill -9 and
// lock expiry; the migrations run while they serve; then each replica in
// turn is killed (-9) in the middle of a seeded fault round and comes back
// as the current release. After each replica, more seeded rounds, with a
// database restart, lost answers and lock expiry among their faults, and
// refunds sent to the current replicas only (the previous release has
// none). Every step is checked against the provider's ledger, the tables
// and the topic: 0 violations, every event once.
//
// -mixed-unsafe-sql runs a statement right after the migrations: a
// migration the previous release does not survive must make this fail.
func TestRollingDeployMixedFleet(t *testing.T) {
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	fmt.Printf("rolling deploy: seed %d; rerun: go test -tags fault -run TestRollingDeployMixedFleet ./test/fault/ -seed %d -mixed-rounds %d\n",
		seed, seed, *flagMixedRounds)
	started := time.Now()
	s := newStack(t, stackOptions{replicas: 3, previous: true, migrateTo: previousSchema})
	c := newChecker(s)
	// answeredBy counts the answers the clients got, by whether the
	// replica ran the previous release when its round began.
	answeredBy := map[bool]int{}
	tally := func(answers []answer) {
		for _, a := range answers {
			answeredBy[a.replica != "" && slices.ContainsFunc(s.replicas, func(r *replica) bool { return r.name == a.replica && r.previous() })]++
		}
	}
	round := 0
	next := func() plan {
		p := newPlan(seed, round)
		round++
		return p
	}

	// The previous release on its own schema, then the migrations under
	// its load: charges only (the refund table does not exist yet).
	p := next()
	p.kill, p.killAfter = 1, 20*time.Millisecond
	ops, answers := s.previousFleetBurst(t, p, nil)
	tally(answers)
	require(t, c.check(ops, answers), fmt.Sprintf("seed %d: the previous release on its schema (%s)", seed, p))
	p = next()
	p.expireLocks, p.expireAfter = true, 10*time.Millisecond
	ops, answers = s.previousFleetBurst(t, p, func() error {
		if err := migrations.Up(context.Background(), s.dsn); err != nil {
			return err
		}
		if *flagUnsafeSQL != "" {
			_, err := s.db.Exec(context.Background(), *flagUnsafeSQL)
			return err
		}
		return nil
	})
	tally(answers)
	v := c.check(ops, answers)
	v = append(v, c.checkGlobal()...)
	require(t, v, fmt.Sprintf("seed %d: the migrations under the previous release's load (%s)", seed, p))

	// Roll one replica at a time, each in the middle of a round.
	faults := []func(p *plan){
		func(p *plan) { p.dbRestart, p.dbAfter, p.dbDown = "fast", 15*time.Millisecond, 200*time.Millisecond },
		func(p *plan) {
			p.expireLocks, p.expireAfter, p.frontLink, p.frontReplica = true, 10*time.Millisecond, "lose", 2
		},
		func(p *plan) { p.providerLink = "lose" },
	}
	for i, r := range s.replicas {
		p := next()
		p.kill = -1 // the roll is this round's kill
		faults[i](&p)
		tally(s.mixedRound(t, c, p, seed, r))
		for range *flagMixedRounds {
			tally(s.mixedRound(t, c, next(), seed, nil))
			if round%100 == 0 {
				fmt.Printf("rolling deploy: %d rounds done in %s, fleet %s\n", round, time.Since(started).Round(time.Second), s.fleet())
			}
		}
	}
	for _, r := range s.replicas {
		if r.previous() {
			t.Fatalf("replica %s still runs the previous release after the roll", r.name)
		}
	}
	l, rl := s.provider.Counters(), s.provider.RefundCounters()
	fmt.Printf("rolling deploy: seed %d, %d rounds, %s, violations 0; provider: %d charges, %d declines, %d replays; refunds: %d made, %d declined; events redelivered: %d\n"+
		"rolling deploy: answers from the previous release %d, from the current %d; the previous release's statements that met a changed table (0A000): %d\n",
		seed, round, time.Since(started).Round(time.Second), l.Charges, l.Declines, l.Replays, rl.Refunds, rl.Declines, c.redeliveries,
		answeredBy[true], answeredBy[false], s.logLines("cached plan must not change result type"))
}

// dropCommandDefault is the contract step of migration 00013 taken a
// release too early: the previous release's claim does not name the
// command column and relies on its default.
const dropCommandDefault = `ALTER TABLE idempotency_record ALTER COLUMN command DROP DEFAULT`

// A migration that the previous release does not survive must fail the
// rolling deploy's check: TestRollingDeployMixedFleet, run as a child of
// this test binary with the previous release's charges broken right after
// the migrations, fails, and says why. (With a harmless statement in its
// place the child passes, and so this fails.)
func TestAnUnsafeMigrationFailsTheRollingDeploy(t *testing.T) {
	previousRelease(t) // built (or found in the cache) before the child needs it
	args := []string{"-test.run", "^TestRollingDeployMixedFleet$", "-test.count", "1",
		"-seed", "27", "-mixed-rounds", "0", "-mixed-unsafe-sql", dropCommandDefault}
	child := exec.Command(os.Args[0], args...) //nolint:gosec // G702: this test binary, run again as the child
	child.Env = append(os.Environ(), serviceBinaryEnv+"="+binary)
	out, err := child.CombinedOutput()
	if err == nil {
		t.Fatalf("the rolling deploy passed with %q applied under the previous release:\n%s", dropCommandDefault, out)
	}
	for _, want := range []string{
		"neither the stored outcome nor a retryable answer",
		`null value in column \"command\" of relation \"idempotency_record\" violates not-null constraint`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the failed run does not say %q:\n%s", want, out)
		}
	}
}

// mixedRound runs p on the mixed fleet and checks it. With roll set, that
// replica is killed (-9) during the burst and comes back as the current
// release. Refunds go to replicas of the current release only, and none is
// abandoned while a replica of the previous release runs: its completer
// leaves a refund's record alone (as it must), so only a current leader
// finishes it, and the round would wait on which replica leads.
// It returns the clients' answers.
func (s *stack) mixedRound(t *testing.T, c *checker, p plan, seed uint64, roll *replica) []answer {
	t.Helper()
	var current []int
	mixed := false
	for i, r := range s.replicas {
		switch {
		case r == roll:
		case r.previous():
			mixed = true
		default:
			current = append(current, i)
		}
	}
	if roll != nil {
		mixed = true
	}
	if len(current) == 0 {
		p.refunds = nil
	}
	for i := range p.refunds {
		for j, to := range p.refunds[i].senders {
			p.refunds[i].senders[j] = current[to%len(current)]
		}
		if mixed {
			p.refunds[i].abandoned = false
		}
	}
	var rolled sync.WaitGroup
	if roll != nil {
		roll.runNext("")
		rolled.Go(func() {
			time.Sleep(20 * time.Millisecond)
			roll.kill()
		})
	}
	ops, refunds, answers := s.runRound(t, p)
	rolled.Wait()
	if roll != nil && (!roll.running() || roll.previous()) {
		// The kill came after the round's heal: start it now.
		roll.kill()
		must(t, roll.start())
	}
	canaryOps, canaryAnswers := s.canaries(t, p.round)
	ops, answers = append(ops, canaryOps...), append(answers, canaryAnswers...)
	v := c.check(ops, answers)
	v = append(v, c.checkRefunds(refunds, answers)...)
	v = append(v, c.checkGlobal()...)
	what := "seeded round"
	if roll != nil {
		what = "rolling " + roll.name
	}
	require(t, v, fmt.Sprintf("seed %d round %d, %s, fleet %s (%s)", seed, p.round, what, s.fleet(), p))
	return answers
}

// logLines counts the lines of every replica's log that contain text.
func (s *stack) logLines(text string) int {
	n := 0
	for _, r := range s.replicas {
		b, _ := os.ReadFile(r.log)
		n += strings.Count(string(b), text)
	}
	return n
}

// fleet names what each replica runs.
func (s *stack) fleet() string {
	var b strings.Builder
	for i, r := range s.replicas {
		if i > 0 {
			b.WriteString(" ")
		}
		release := "current"
		if r.previous() {
			release = "previous"
		}
		fmt.Fprintf(&b, "%s=%s", r.name, release)
	}
	return b.String()
}

// previousFleetBurst is a round of charges for a fleet that may still run
// on the previous schema (runRound also reads the refund table): p's
// charges, each sent by its senders at once, with p's kill and lock expiry,
// and during (if not nil) running beside them; then every careful client
// settles, and the completer finishes the abandoned ones.
func (s *stack) previousFleetBurst(t *testing.T, p plan, during func() error) ([]op, []answer) {
	t.Helper()
	ops := make([]op, len(p.ops))
	for i, o := range p.ops {
		s.addOrder(o.op)
		ops[i] = o.op
	}
	var wg sync.WaitGroup
	var duringErr error
	if during != nil {
		wg.Go(func() { duringErr = during() })
	}
	// Each attempt, and later each settling, writes a slot of its own.
	first := make([][]answer, len(p.ops))
	for i, o := range p.ops {
		first[i] = make([]answer, len(o.senders))
		for j, r := range o.senders {
			wg.Go(func() { first[i][j] = s.replicas[r].charge(o.op, 500*time.Millisecond) })
		}
	}
	// The plan's kill and lock expiry, each at its time.
	type timedFault struct {
		after time.Duration
		do    func()
	}
	var timed []timedFault
	if p.kill >= 0 {
		timed = append(timed, timedFault{p.killAfter, s.replicas[p.kill].kill})
	}
	if p.expireLocks {
		timed = append(timed, timedFault{p.expireAfter, func() {
			_, _ = s.db.Exec(context.Background(), `UPDATE idempotency_record SET locked_until = clock_timestamp() - interval '1 millisecond'
				WHERE status = 'IN_PROGRESS' AND idempotency_key = ANY($1)`, keysOf(ops))
		}})
	}
	for _, f := range timed {
		wg.Go(func() {
			time.Sleep(f.after)
			f.do()
		})
	}
	wg.Wait()
	must(t, duringErr)
	s.heal()
	canaryOps, canaryAnswers := s.canaries(t, p.round)
	ops = append(ops, canaryOps...)
	settled := make([][]answer, len(p.ops))
	for i, o := range p.ops {
		if !o.abandoned {
			wg.Go(func() { settled[i] = s.settle(o.op, 30*time.Second) })
		}
	}
	wg.Wait()
	orders := make([]int64, len(ops))
	for i, o := range ops {
		orders[i] = o.order
	}
	waitFor(t, 30*time.Second, fmt.Sprintf("round %d quiet", p.round), func() bool {
		return s.count(`SELECT count(*) FROM idempotency_record WHERE status = 'IN_PROGRESS' AND idempotency_key = ANY($1)`, keysOf(ops)) == 0 &&
			s.count(`SELECT count(*) FROM payment WHERE status = 'PENDING' AND order_id = ANY($1)`, orders) == 0
	})
	return ops, slices.Concat(slices.Concat(first...), slices.Concat(settled...), canaryAnswers)
}

// canaries makes one new charge through each running replica of the
// previous release, first sent to that replica, then settled: whatever the
// round's plan drew, every old replica claims a fresh key on the schema as
// it now is, where a migration it does not survive shows at once.
func (s *stack) canaries(t *testing.T, round int) ([]op, []answer) {
	t.Helper()
	var ops []op
	var answers []answer
	for i, r := range s.replicas {
		if !r.running() || !r.previous() {
			continue
		}
		o := op{key: fmt.Sprintf("round-%d-canary-%s", round, r.name), order: int64(3_000_000 + round*10 + i), customer: 3,
			amount: "10.00", ext: fmt.Sprintf("pi_round_%d_canary_%s", round, r.name)}
		s.addOrder(o)
		ops = append(ops, o)
		a := r.charge(o, 3*time.Second)
		answers = append(answers, a)
		if !a.final() {
			answers = append(answers, s.settle(o, 30*time.Second)...)
		}
	}
	return ops, answers
}

// The advisory lock keys of the two leaderships, as the service takes them
// (internal/service/jobs.go, internal/repository/outbox.go): the same
// in the previous release and this one, which is what makes one leader of
// each across both.
const jobsLeaderKey int64 = 0x7061796d656e7473

func relayLeaderKey() int64 {
	h := fnv.New64a()
	h.Write([]byte("payment-service/outbox-relay"))
	return int64(h.Sum64())
}

// advisoryHolders returns every granted advisory lock of the database, by
// key, with the backend pids that hold it: a release that took its
// leadership under another key shows up as a key of its own.
func (s *stack) advisoryHolders() map[int64][]int32 {
	s.t.Helper()
	rows, err := s.db.Query(context.Background(), `SELECT (classid::bigint << 32) | objid::bigint, pid FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1`)
	must(s.t, err)
	defer rows.Close()
	out := map[int64][]int32{}
	for rows.Next() {
		var key int64
		var pid int32
		must(s.t, rows.Scan(&key, &pid))
		out[key] = append(out[key], pid)
	}
	must(s.t, rows.Err())
	return out
}

// oneLeaderEach reports whether the only advisory locks held are the jobs'
// and the relay's, each by one session, and returns those sessions.
func (s *stack) oneLeaderEach() (map[string]int32, bool) {
	held := s.advisoryHolders()
	leaders := map[string]int32{}
	for name, key := range map[string]int64{"jobs": jobsLeaderKey, "outbox relay": relayLeaderKey()} {
		if len(held[key]) != 1 {
			return nil, false
		}
		leaders[name] = held[key][0]
	}
	return leaders, len(held) == len(leaders)
}

// One outbox relay and one jobs leader across the previous release and the
// current one, and each order's events in order when leadership moves from
// a replica of the previous release to one of the current: the previous
// release leads alone, two current replicas join (it keeps both
// leaderships), then a stream of orders, each declined, charged and
// refunded twice, runs while the leader is killed (-9) in the middle. A
// current replica takes both over; on the topic, each order's events come,
// by their first delivery, in the order the outbox wrote them, on one
// partition; the money and every event once, as everywhere.
func TestLeadershipMovesFromThePreviousReleaseToTheCurrent(t *testing.T) {
	s := newStack(t, stackOptions{replicas: 1, previous: true})
	c := newChecker(s)
	old := s.replicas[0]
	var oldLeaders map[string]int32
	waitFor(t, 20*time.Second, "the previous release leads the jobs and the relay", func() bool {
		var ok bool
		oldLeaders, ok = s.oneLeaderEach()
		return ok
	})
	for i := 1; i <= 2; i++ {
		r := s.newReplica(fmt.Sprintf("r%d", i))
		must(t, r.start())
		s.replicas = append(s.replicas, r)
	}
	time.Sleep(3 * time.Second) // three firings of the jobs' schedule
	if got, ok := s.oneLeaderEach(); !ok || !maps.Equal(got, oldLeaders) {
		t.Fatalf("advisory locks held with two current replicas beside the previous release: %v; want only the previous release's sessions %v",
			s.advisoryHolders(), oldLeaders)
	}

	// The stream: per order a decline, a charge, then two refunds, one
	// after the other. When a third of the orders are done the leader
	// stalls (SIGSTOP: its sessions, and so its leaderships, stay), until
	// the outbox holds a backlog of rows to publish (10 s at most), then
	// dies (-9): the relay's leadership moves with several events of one
	// order waiting, whose order the new leader must keep.
	const orders = 12
	var (
		mu      sync.Mutex
		ops     []op
		refunds []refundOp
		answers []answer
		done    int
		wg      sync.WaitGroup
	)
	third := make(chan struct{})
	backlog := 0 // unpublished outbox rows when the leader died
	wg.Go(func() {
		<-third
		old.signal(syscall.SIGSTOP)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if backlog = s.count(`SELECT count(*) FROM outbox_event WHERE published_at IS NULL`); backlog >= 8 {
				break
			}
		}
		old.kill()
	})
	for i := range orders {
		wg.Go(func() {
			order := int64(8_000_000 + i)
			declined := op{key: fmt.Sprintf("lead-%d-declined", i), order: order, customer: 8, amount: "30.00", ext: fmt.Sprintf("decline_lead_%d", i)}
			charged := op{key: fmt.Sprintf("lead-%d-charged", i), order: order, customer: 8, amount: "30.00", ext: fmt.Sprintf("pi_lead_%d", i)}
			s.addOrder(declined)
			mine := s.settle(declined, 30*time.Second)
			paidAs := s.settle(charged, 30*time.Second)
			mine = append(mine, paidAs...)
			rs := make([]refundOp, 2)
			for j := range rs {
				rs[j] = refundOp{key: fmt.Sprintf("lead-%d-refund-%d", i, j), amount: "10.00", ext: fmt.Sprintf("pi_lead_%d_refund_%d", i, j),
					paid: paid{op: charged, id: paymentOf(t, paidAs)}}
				mine = append(mine, s.settle(rs[j], 30*time.Second)...)
			}
			mu.Lock()
			defer mu.Unlock()
			ops = append(ops, declined, charged)
			refunds = append(refunds, rs...)
			answers = append(answers, mine...)
			if done++; done == orders/3 {
				close(third)
			}
		})
	}
	wg.Wait()
	if old.running() {
		t.Fatal("the previous release's replica was not killed")
	}
	waitFor(t, 20*time.Second, "one current replica leads the jobs and one the relay", func() bool {
		got, ok := s.oneLeaderEach()
		return ok && got["jobs"] != oldLeaders["jobs"] && got["outbox relay"] != oldLeaders["outbox relay"]
	})

	v := c.check(ops, answers)
	v = append(v, c.checkRefunds(refunds, answers)...)
	v = append(v, c.checkGlobal()...)
	v = append(v, s.eventsInOrder(t, ops)...)
	require(t, v, "leadership moved from the previous release to the current one")
	t.Logf("%d orders, %d outbox events, %d unpublished when the relay's leader died, %d redelivered after", orders,
		s.count(`SELECT count(*) FROM outbox_event`), backlog, c.redeliveries)
}

// signal sends sig to the replica's process, if it has one.
func (r *replica) signal(sig syscall.Signal) {
	r.mu.Lock()
	cmd := r.cmd
	r.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(sig)
	}
}

// paymentOf returns the payment a settled charge's final answer (201) made.
func paymentOf(t *testing.T, seen []answer) int64 {
	t.Helper()
	var body struct {
		ID int64 `json:"id"`
	}
	if len(seen) == 0 {
		t.Fatal("a charge with no answer")
	}
	last := seen[len(seen)-1]
	if last.status != 201 || json.Unmarshal(last.body, &body) != nil || body.ID == 0 {
		t.Fatalf("charge: %s, want 201 with the payment", last)
	}
	return body.ID
}

// eventsInOrder checks that each order of ops has its events on one
// partition, and that their first deliveries come in the order the outbox
// wrote them (a redelivery, which a new relay leader makes of the rows the
// old one published but had not marked, may come later: consumers dedup
// on eventId). Call it once the outbox is published (checker.check waits).
func (s *stack) eventsInOrder(t *testing.T, ops []op) violations {
	t.Helper()
	var v violations
	keys := map[string]bool{}
	var messageKeys []string
	for _, o := range ops {
		k := fmt.Sprint(o.order)
		if !keys[k] {
			keys[k] = true
			messageKeys = append(messageKeys, k)
		}
	}
	want := map[string][]string{}
	rows, err := s.db.Query(context.Background(), `SELECT message_key, event_id::text FROM outbox_event WHERE message_key = ANY($1) ORDER BY id`, messageKeys)
	must(t, err)
	for rows.Next() {
		var k, id string
		must(t, rows.Scan(&k, &id))
		want[k] = append(want[k], id)
	}
	rows.Close()
	must(t, rows.Err())

	got := map[string][]string{}
	seen := map[string]bool{}
	partition := map[string]int{}
	for _, r := range kafkatest.ReadAll(t, s.brokers, s.topic, 30*time.Second) {
		k := string(r.Key)
		if !keys[k] {
			continue
		}
		if p, ok := partition[k]; ok && p != r.Partition {
			v.add("order %s: events on partitions %d and %d", k, p, r.Partition)
		}
		partition[k] = r.Partition
		var e struct {
			EventID string `json:"eventId"`
		}
		if err := json.Unmarshal(r.Value, &e); err != nil {
			v.add("unreadable event at partition %d offset %d", r.Partition, r.Offset)
			continue
		}
		if !seen[e.EventID] {
			seen[e.EventID] = true
			got[k] = append(got[k], e.EventID)
		}
	}
	for _, k := range messageKeys {
		if !slices.Equal(got[k], want[k]) {
			v.add("order %s: events first delivered as %v, the outbox wrote %v", k, got[k], want[k])
		}
	}
	return v
}
