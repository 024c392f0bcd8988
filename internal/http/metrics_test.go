package http_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// Anyone, without a key, can send any method to any path. The request
// metrics must not grow with them: a made-up method is counted as "other"
// and a path no route matched as "unmatched", so 80 such requests add
// four series, not one or more per request.
func TestRequestMetricLabelsStayBounded(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	noKey := map[string]string{"Authorization": ""}
	// The series every service has, /metrics's own among them.
	s.request(t, http.MethodGet, "/healthz", "", noKey)
	requestSeries(t, s)
	before := requestSeries(t, s)

	for i := range 40 {
		s.request(t, fmt.Sprintf("MADEUP%d", i), "/payments", "", noKey)
		s.request(t, http.MethodGet, fmt.Sprintf("/nope-%d/payments", i), "", noKey)
	}
	after := requestSeries(t, s)

	knownMethods := map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "DELETE": true,
		"CONNECT": true, "OPTIONS": true, "TRACE": true, "PATCH": true, "other": true}
	for _, series := range after {
		method, route := series[1], series[2]
		if !knownMethods[method] {
			t.Errorf("series with method label %q", method)
		}
		if strings.Contains(route, "nope") {
			t.Errorf("series with route label %q, a path no route has", route)
		}
	}
	added := len(after) - len(before)
	t.Logf("80 requests with made-up methods and paths added %d series", added)
	// Two label sets, (other, /payments) with 405 and (GET, unmatched) with
	// 404, in each of the two metrics.
	if added > 4 {
		t.Errorf("that is more than 4")
	}
}

var requestSeriesLine = regexp.MustCompile(`^http_request(?:s_total|_duration_seconds_count)\{.*?method="([^"]*)".*?route="([^"]*)"`)

// requestSeries lists the series of the request metrics on /metrics, each
// as the regexp's match: line, method, route.
func requestSeries(t *testing.T, s *testService) [][]string {
	t.Helper()
	r := s.request(t, http.MethodGet, "/metrics", "", map[string]string{"Authorization": ""})
	var series [][]string
	sc := bufio.NewScanner(bytes.NewReader(r.body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := requestSeriesLine.FindStringSubmatch(sc.Text()); m != nil {
			series = append(series, m)
		}
	}
	if len(series) == 0 {
		t.Fatalf("no request series on /metrics:\n%s", r.body)
	}
	return series
}
