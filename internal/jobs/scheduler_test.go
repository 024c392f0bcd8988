package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/example/payment-service/internal/jobs"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/testdb"
)

const leaderKey = 42

// everySecond fires the purge often enough to watch several firings; the
// completer is parked on a date that never comes during the test.
var everySecond = jobs.Schedule{PurgeCron: "* * * * * *", CompleterCron: "0 0 0 1 1 *", StopTimeout: 10 * time.Second}

type scheduled struct {
	*replica
	leader    *repository.LeaderLock
	scheduler *jobs.Scheduler
}

func startScheduled(t *testing.T, dsn string) *scheduled {
	t.Helper()
	r := newReplica(t, dsn, replicaOptions{})
	leader, err := repository.NewLeaderLock(r.db, leaderKey)
	if err != nil {
		t.Fatal(err)
	}
	s, err := jobs.NewScheduler(r.jobs, everySecond, leader)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	sc := &scheduled{replica: r, leader: leader, scheduler: s}
	t.Cleanup(func() { sc.stop(t) })
	return sc
}

func (s *scheduled) stop(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := s.scheduler.Shutdown(ctx); err != nil {
		t.Errorf("scheduler shutdown: %v", err)
	}
	if err := s.leader.Close(ctx); err != nil {
		t.Errorf("leader close: %v", err)
	}
}

func (s *scheduled) runs(t *testing.T) float64 {
	return s.counter(t, "payment_job_runs_total", map[string]string{"job": jobs.JobPurgeExpired})
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Two replicas schedule the same job on one database: each firing runs on
// one of them only (the leader), and when the leader stops, the other takes
// over.
func TestTwoSchedulersOnOneDatabaseRunEachFiringOnce(t *testing.T) {
	t.Parallel()
	dsn := testdb.New(t)
	a, b := startScheduled(t, dsn), startScheduled(t, dsn)

	waitFor(t, "three runs", func() bool { return a.runs(t)+b.runs(t) >= 3 })
	leader, follower := a, b
	if b.runs(t) > a.runs(t) {
		leader, follower = b, a
	}
	leader.stop(t)
	ranOnLeader := leader.runs(t)
	if follower.runs(t) != 0 {
		t.Fatalf("while one replica led, the other ran the job %v times too", follower.runs(t))
	}
	if ranOnLeader < 3 {
		t.Fatalf("the leader ran %v times, want at least 3", ranOnLeader)
	}

	// The stopped leader gave the lock up: the other replica now runs it.
	waitFor(t, "the follower to take over", func() bool { return follower.runs(t) >= 1 })
	if leader.runs(t) != ranOnLeader {
		t.Errorf("the stopped leader kept running")
	}
}
