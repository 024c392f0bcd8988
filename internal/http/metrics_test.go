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
// and a path no route matched as "unmatched", so 80 such requests add a
// handful of series, not one per request.
func TestRequestMetricLabelsStayBounded(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	noKey := map[string]string{"Authorization": ""}
	s.request(t, http.MethodGet, "/healthz", "", noKey) // the series every service has
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
	if added := len(after) - len(before); added > 6 {
		t.Errorf("80 requests with made-up methods and paths added %d series, want at most 6", added)
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
