package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// wrk is the load generator when it is installed (Debian: apt-get install
// wrk): a C program, so the two cores this machine shares between the load,
// the service and PostgreSQL go to the service rather than to a Go HTTP
// client, as pgbench's C client leaves them to PostgreSQL for the ceiling.
// Its Lua script builds each request: replays draw one of the replay keys;
// new charges count through a range of orders of their own, a slice per
// wrk thread.
const wrkScript = `
local api_key, workload, first, span, replay_key, replay_order, replay_keys, tail = "", "", 0, 0, 0, 0, 0, ""
local threads, counter = 0, 0

function setup(thread)
  thread:set("index", threads)
  threads = threads + 1
end

function init(args)
  api_key, workload = args[1], args[2]
  first, span = tonumber(args[3]), tonumber(args[4])
  replay_key, replay_order, replay_keys = tonumber(args[5]), tonumber(args[6]), tonumber(args[7])
  tail = args[8]
  wrk.method = "POST"
  wrk.path = "/payments"
  wrk.headers["Authorization"] = "Bearer " .. api_key
  wrk.headers["Content-Type"] = "application/json"
  math.randomseed(os.time() + (index or 0))
end

local body = '{"orderId":%d,"customerId":42,"amount":"10.00","currency":"RUB",%s,"externalPaymentId":"%s"}'

function request()
  local order, key, external
  if workload == "replay" then
    local k = math.random(0, replay_keys - 1)
    order, key, external = replay_order + k, tostring(replay_key + k), "replay_" .. k
  else
    order = first + index * span + counter
    counter = counter + 1
    key, external = "create-" .. order, "pi_" .. order
  end
  wrk.headers["Idempotency-Key"] = key
  return wrk.format(nil, nil, nil, string.format(body, order, tail, external))
end
`

// wrkRun runs wrk for warmup (discarded; 0: none) and then for d, and
// reads its report. Orders for new charges come from b.orders, a slice per
// run.
func (b *bench) wrkRun(ctx context.Context, workload string, clients int, warmup, d time.Duration) (result, error) {
	script := filepath.Join(b.tmp, "bench.lua")
	if err := os.WriteFile(script, []byte(wrkScript), 0o644); err != nil {
		return result{}, err
	}
	threads := min(clients, maxLoadThreads)
	// Enough orders for each thread of this run at maxChargesPerSecond new charges a
	// second, several times what the service makes here. A thread that ran
	// past its slice would charge another thread's orders: the third
	// layer's 409s would then show as errors.
	span := ordersPerThread(warmup + d)
	var first int64
	if workload == "create" {
		first = b.orders.Add(span*int64(threads)) - span*int64(threads) + 1
		if first+span*int64(threads) > b.lastOrder+1 {
			return result{}, fmt.Errorf("out of orders for the service; options.serviceOrders counts too few")
		}
	}
	run := func(d time.Duration, offset int64) (string, error) {
		args := []string{"-t", strconv.Itoa(threads), "-c", strconv.Itoa(clients), "-d", fmt.Sprintf("%ds", int(d.Seconds())),
			"--latency", "-s", script, b.api, "--",
			apiKey, workload, strconv.FormatInt(first+offset, 10), strconv.FormatInt(span, 10)}
		args = append(append(args, b.replayKeyArgs()...), b.tail())
		out, err := exec.CommandContext(ctx, "wrk", args...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("wrk: %w\n%s", err, out)
		}
		return string(out), nil
	}
	// The warmup uses the second half of each thread's slice.
	if warmup > 0 {
		if _, err := run(warmup, span/2); err != nil {
			return result{}, err
		}
	}
	before := b.cpuTimes()
	out, err := run(d, 0)
	if err != nil {
		return result{}, err
	}
	cpu := b.cpuTimes().since(before)
	r, err := parseWrk(out, d)
	cpu.divide(&r)
	return r, err
}

var (
	wrkRate     = regexp.MustCompile(`(?m)^Requests/sec:\s+([0-9.]+)`)
	wrkTotal    = regexp.MustCompile(`(?m)^\s*([0-9]+) requests in`)
	wrkNon2xx   = regexp.MustCompile(`(?m)^\s*Non-2xx or 3xx responses:\s+([0-9]+)`)
	wrkSocket   = regexp.MustCompile(`(?m)^\s*Socket errors: connect ([0-9]+), read ([0-9]+), write ([0-9]+), timeout ([0-9]+)`)
	wrkQuantile = regexp.MustCompile(`(?m)^\s+(50|99)(?:\.000)?%\s+([0-9.]+)(us|ms|s)\s*$`)
)

// parseWrk reads wrk's report: requests/s, the total, errors (non-2xx and
// socket errors) and the latency distribution's 50% and 99%.
func parseWrk(out string, d time.Duration) (result, error) {
	r := result{Duration: d}
	m := wrkRate.FindStringSubmatch(out)
	n := wrkTotal.FindStringSubmatch(out)
	if m == nil || n == nil {
		return r, fmt.Errorf("wrk's report has no rate:\n%s", out)
	}
	r.PerSecond, _ = strconv.ParseFloat(m[1], 64)
	r.Requests, _ = strconv.Atoi(n[1])
	if m := wrkNon2xx.FindStringSubmatch(out); m != nil {
		r.Errors, _ = strconv.Atoi(m[1])
		r.FirstError = m[0]
	}
	if m := wrkSocket.FindStringSubmatch(out); m != nil {
		for _, v := range m[1:] {
			e, _ := strconv.Atoi(v)
			r.Errors += e
		}
		r.FirstError = strings.TrimSpace(m[0])
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		q := wrkQuantile.FindStringSubmatch(sc.Text())
		if q == nil {
			continue
		}
		v, _ := strconv.ParseFloat(q[2], 64)
		unit := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second}[q[3]]
		lat := time.Duration(v * float64(unit))
		if q[1] == "50" {
			r.P50 = lat
		} else {
			r.P99 = lat
		}
	}
	if r.P50 == 0 || r.P99 == 0 {
		return r, fmt.Errorf("wrk's report has no latency distribution:\n%s", out)
	}
	return r, nil
}
