package main

import (
	"fmt"
	"os"
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
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces: the
	// fields that follow are counted from its closing parenthesis.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	// utime and stime are fields 14 and 15 of the whole line, 12 and 13
	// after the command name and the state.
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}
