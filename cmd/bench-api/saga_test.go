package main

import (
	"slices"
	"testing"
)

func TestPeakRatios(t *testing.T) {
	rates := func(rs ...float64) []result {
		out := make([]result, len(rs))
		for i, r := range rs {
			out[i].PerSecond = r
		}
		return out
	}
	for _, tc := range []struct {
		name string
		cs   []int
		runs map[string][]result
		want []float64
	}{{
		name: "each transport at its own best concurrency, pass by pass",
		cs:   []int{1, 16, 64},
		runs: map[string][]result{
			"service create C=1": rates(500, 400), "service saga C=1": rates(200, 150),
			"service create C=16": rates(1000, 1100), "service saga C=16": rates(800, 700),
			"service create C=64": rates(900, 1000), "service saga C=64": rates(850, 990),
		},
		want: []float64{0.85, 0.9},
	}, {
		name: "a pass without saga runs ends the ratios",
		cs:   []int{16},
		runs: map[string][]result{"service create C=16": rates(1000, 1000), "service saga C=16": rates(800)},
		want: []float64{0.8},
	}, {
		name: "no runs",
		cs:   []int{16},
		runs: map[string][]result{},
		want: nil,
	}, {
		name: "no HTTP rate, no ratio",
		cs:   []int{16},
		runs: map[string][]result{"service create C=16": rates(0), "service saga C=16": rates(800)},
		want: nil,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := peakRatios("service", tc.cs, tc.runs)
			if !slices.Equal(got, tc.want) {
				t.Errorf("peakRatios = %v, want %v", got, tc.want)
			}
		})
	}
}
