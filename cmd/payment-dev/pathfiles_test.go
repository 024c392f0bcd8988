//go:build pathfiles

package main

import (
	"reflect"
	"strings"
	"testing"
)

// The rule make path-files counts by (pathfiles.go): the files a profile
// shows run, but the stand-ins; and a file counted when more than half of
// the runs ran it. make path-files runs this first.
func TestPathFilesRule(t *testing.T) {
	t.Parallel()
	const module = "example.com/svc"
	profile := `mode: atomic
example.com/svc/internal/app/charge.go:10.2,12.3 2 1
example.com/svc/internal/app/charge.go:14.2,15.3 1 0
example.com/svc/internal/app/unrun.go:3.2,4.3 1 0
example.com/svc/internal/http/payments.go:7.1,9.2 3 4
example.com/svc/internal/sandboxprovider/server.go:1.1,2.2 1 9
example.com/svc/cmd/payment-dev/main.go:1.1,2.2 1 1
other.org/dep/x.go:1.1,2.2 1 1
`
	got, err := coveredFiles(strings.NewReader(profile), module)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"internal/app/charge.go", "internal/http/payments.go"}; !reflect.DeepEqual(got, want) {
		t.Errorf("covered files: got %q, want %q", got, want)
	}
	if _, err := coveredFiles(strings.NewReader("mode: atomic\nnonsense\n"), module); err == nil {
		t.Error("a line that is not a profile's was read without an error")
	}

	tests := []struct {
		name      string
		runs      [][]string
		wantFiles []string
		wantPkgs  int
		wantNoise map[string]int
	}{
		{"every run alike", [][]string{{"a/x.go", "b/y.go"}, {"a/x.go", "b/y.go"}, {"a/x.go", "b/y.go"}},
			[]string{"a/x.go", "b/y.go"}, 2, map[string]int{}},
		{"three of five count, two of five do not", [][]string{
			{"a/x.go", "job/tick.go", "relay/r.go"}, {"a/x.go", "job/tick.go", "relay/r.go"}, {"a/x.go", "job/tick.go"}, {"a/x.go"}, {"a/x.go", "a/z.go"}},
			[]string{"a/x.go", "job/tick.go"}, 2, map[string]int{"relay/r.go": 2, "a/z.go": 1}},
		{"half is not more than half", [][]string{{"a/x.go", "b/y.go"}, {"a/x.go"}},
			[]string{"a/x.go"}, 1, map[string]int{"b/y.go": 1}},
		{"a file at the module's root", [][]string{{"main.go"}}, []string{"main.go"}, 1, map[string]int{}},
	}
	report := countRuns([][]string{{"a/x.go", "b/y.go"}, {"a/x.go"}, {"a/x.go"}}).report("a path", 3)
	if want := "a path: 1 files, 1 packages\n    a/x.go\n  not counted, ran in 1 of 3 runs: b/y.go\n"; report != want {
		t.Errorf("report:\n%s\nwant:\n%s", report, want)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := countRuns(tc.runs)
			if !reflect.DeepEqual(c.files, tc.wantFiles) || c.packages != tc.wantPkgs || !reflect.DeepEqual(c.noise, tc.wantNoise) {
				t.Errorf("got %q in %d packages, noise %v; want %q in %d, noise %v", c.files, c.packages, c.noise, tc.wantFiles, tc.wantPkgs, tc.wantNoise)
			}
		})
	}
}
