package docs_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// docs/capacity.md's measured figures are the ones in docs/bench-scale.json,
// the output of the run docs/benchmarks.md names (`bench-api -scale`): this
// test renders the lines the document must hold from the file, so a new
// run whose figures differ fails until the document says what it measured.

// scaleFile is the part of bench-api's JSON output that the document
// quotes.
type scaleFile struct {
	Scale struct {
		Variants []struct {
			Name    string `json:"name"`
			Prefill int64  `json:"prefill"`
			Create  []struct {
				WALBytesPerCharge float64 `json:"walBytesPerCharge"`
				DBCPUPerRequest   int64   `json:"dbCpuPerRequest"`
				CPUPerRequest     int64   `json:"cpuPerRequest"`
				PerSecond         float64 `json:"perSecond"`
			} `json:"create"`
			Sizes []struct {
				Table    string `json:"table"`
				Relation string `json:"relation"`
				Bytes    int64  `json:"bytes"`
				Rows     int64  `json:"rows"`
			} `json:"sizes"`
		} `json:"variants"`
		Purge []struct {
			Deleted       int64 `json:"deleted"`
			PurgeTime     int64 `json:"purgeTime"`
			RowsPerSecond *int  `json:"rowsPerSecond"`
		} `json:"purge"`
	} `json:"scale"`
}

// retention is each table's default retention in hours (internal/config);
// payment has none, so the document gives it per day.
var retention = map[string]float64{"idempotency_record": 72, "outbox_event": 24, "processed_event": 168}

func TestCapacityFiguresComeFromTheBenchmark(t *testing.T) {
	f, doc := scaleAndDoc(t, "bench-scale.json", "capacity.md")
	var want []string
	// Bytes per row come from the largest prefilled database.
	largest := -1
	for i, v := range f.Scale.Variants {
		if v.Prefill > 0 && (largest < 0 || v.Prefill > f.Scale.Variants[largest].Prefill) {
			largest = i
		}
	}
	for i, v := range f.Scale.Variants {
		if i != largest {
			continue
		}
		// Bytes per row of each table (heap and TOAST) and index.
		perTable := map[string]float64{}
		for _, s := range v.Sizes {
			perRow := float64(s.Bytes) / float64(s.Rows)
			perTable[s.Table] += perRow
			want = append(want, fmt.Sprintf("| %s | %s | %.0f |", s.Table, s.Relation, perRow))
		}
		// Rows and gigabytes kept at three rates, under the default
		// retention.
		for _, table := range []string{"idempotency_record", "outbox_event", "processed_event", "payment"} {
			hours, ok := retention[table]
			if !ok {
				hours = 24 // payment: what a day adds
			}
			line := "| " + table + " |"
			for _, rate := range []float64{100, 1000, 10000} {
				rows := rate * hours * 3600
				line += fmt.Sprintf(" %.0f M, %.1f GB |", rows/1e6, rows*perTable[table]/1e9)
			}
			want = append(want, line)
		}
	}
	for _, v := range f.Scale.Variants {
		wal := make([]float64, 0, len(v.Create))
		db := make([]float64, 0, len(v.Create))
		for _, r := range v.Create {
			wal = append(wal, r.WALBytesPerCharge)
			db = append(db, float64(r.DBCPUPerRequest)/1e3)
		}
		want = append(want, fmt.Sprintf("| %s | %.0f | %.0f |", v.Name, medianOf(wal), medianOf(db)))
	}
	// The purge's rate, the median of the cycles at each pace
	// (-purge-rates), in the order the cycles first ran them.
	rates := map[string][]float64{}
	var paces []string
	for _, p := range f.Scale.Purge {
		pace := ""
		switch {
		case p.RowsPerSecond == nil:
		case *p.RowsPerSecond == 0:
			pace = ", unpaced"
		default:
			pace = fmt.Sprintf(" at CLEANUP_ROWS_PER_SECOND=%d", *p.RowsPerSecond)
		}
		if _, seen := rates[pace]; !seen {
			paces = append(paces, pace)
		}
		rates[pace] = append(rates[pace], float64(p.Deleted)/(float64(p.PurgeTime)/1e9))
	}
	for _, pace := range paces {
		want = append(want, fmt.Sprintf("purge rate under load%s: %.0f rows/s", pace, medianOf(rates[pace])))
	}
	var missing []string
	for _, w := range want {
		if !strings.Contains(string(doc), w) {
			missing = append(missing, w)
		}
	}
	if len(missing) > 0 {
		t.Errorf("docs/capacity.md lacks these figures of docs/bench-scale.json:\n%s", strings.Join(missing, "\n"))
	}
}

// scaleAndDoc reads docs/<results>, a bench-api -scale output, and
// docs/<doc>, the document that quotes it.
func scaleAndDoc(t *testing.T, results, doc string) (scaleFile, []byte) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "docs", results)) //nolint:gosec // G304: the repository's own docs
	if err != nil {
		t.Fatal(err)
	}
	var f scaleFile
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(root, "docs", doc)) //nolint:gosec // G304: the repository's own docs
	if err != nil {
		t.Fatal(err)
	}
	return f, text
}

func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// docs/benchmarks.md's sizes at 10,000,000 rows are those of
// docs/bench-scale-10m.json.
func TestTenMillionRowSizesComeFromTheBenchmark(t *testing.T) {
	f, doc := scaleAndDoc(t, "bench-scale-10m.json", "benchmarks.md")
	var missing []string
	for _, v := range f.Scale.Variants {
		if v.Prefill != 10_000_000 {
			continue
		}
		for _, s := range v.Sizes {
			if s.Bytes < 1<<20 {
				continue // the partial indexes, summed up in the text
			}
			line := fmt.Sprintf("| %s | %s | %s | %.1f | %.0f |", s.Table, s.Relation, thousands(s.Rows), float64(s.Bytes)/(1<<20), float64(s.Bytes)/float64(s.Rows))
			if !strings.Contains(string(doc), line) {
				missing = append(missing, line)
			}
		}
	}
	if len(missing) > 0 {
		t.Errorf("docs/benchmarks.md lacks these sizes of docs/bench-scale-10m.json:\n%s", strings.Join(missing, "\n"))
	}
}

// thousands writes n with commas between groups of three digits.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
