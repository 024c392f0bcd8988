package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's CPU
// times: 100 on every Linux this runs on.
const clockTicks = 100

// perRequest is cpu, the service's CPU time over a run, per request of
// the run; zero when there is nothing to divide (no requests, or a reading
// of the CPU time that failed).
func perRequest(cpu time.Duration, requests int) time.Duration {
	if requests <= 0 || cpu <= 0 {
		return 0
	}
	return cpu / time.Duration(requests)
}

// processCPU is the CPU time (user and system) pid has used so far, from
// /proc/<pid>/stat. Its resolution is 10 ms; a run's few seconds of work
// make that well under one per cent.
func processCPU(pid int) (time.Duration, error) { return readCPU(pid, false) }

// readCPU is pid's user and system time, and with children that of its
// children it has waited for.
func readCPU(pid int, children bool) (time.Duration, error) {
	fields, err := procStatFields(pid)
	if err != nil {
		return 0, err
	}
	// utime and stime are fields 14 and 15 of the whole line, cutime and
	// cstime 16 and 17: 11 to 14 after the command name and the state.
	counted := fields[11:13]
	if children {
		counted = fields[11:15]
	}
	var ticks int64
	for _, f := range counted {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// cpuTimes are the CPU times a run is charged: the service's and its
// database cluster's.
type cpuTimes struct {
	service, database time.Duration
	ok                bool // both were read
}

// cpuTimes reads the service's CPU time and its cluster's (clusterCPU);
// not ok if either cannot be read.
func (b *bench) cpuTimes() cpuTimes {
	service, err1 := processCPU(b.servicePID)
	database, err2 := clusterCPU(b.postmasterPID)
	return cpuTimes{service: service, database: database, ok: err1 == nil && err2 == nil}
}

// since is the CPU time used between before and t; not ok unless both
// readings are.
func (t cpuTimes) since(before cpuTimes) cpuTimes {
	return cpuTimes{service: t.service - before.service, database: t.database - before.database, ok: t.ok && before.ok}
}

// divide sets r's CPU per request from t, the CPU time of r's run.
func (t cpuTimes) divide(r *result) {
	if !t.ok {
		return
	}
	r.CPUPerRequest = perRequest(t.service, r.Requests)
	r.DBCPUPerRequest = perRequest(t.database, r.Requests)
}

// clusterCPU is the CPU time a PostgreSQL cluster has used so far: its
// postmaster's own, its exited children's (backends, autovacuum workers:
// the kernel adds them to the parent that waited for them) and its live
// children's. The difference of two readings is what the cluster did in
// between, a connection that ended meanwhile included.
func clusterCPU(postmaster int) (time.Duration, error) {
	total, err := readCPU(postmaster, true)
	if err != nil {
		return 0, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, err := parentPID(pid); err != nil || ppid != postmaster {
			continue // not a child, or it has just exited
		}
		if t, err := readCPU(pid, false); err == nil {
			total += t
		}
	}
	return total, nil
}

// procStatFields are the fields of /proc/<pid>/stat after the command name
// (field 2, in parentheses, which may hold spaces): the state is [0].
func procStatFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 15 {
		return nil, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	return fields, nil
}

func parentPID(pid int) (int, error) {
	fields, err := procStatFields(pid)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(fields[1]) // field 4 of the whole line
}

// postmasterPID reads the cluster's postmaster.pid, whose first line is
// the postmaster's process id.
func postmasterPID(clusterDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(clusterDir, "data", "postmaster.pid")) //nolint:gosec // G304: the cluster's own postmaster.pid
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}
