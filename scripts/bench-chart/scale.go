package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// -scale draws docs/bench-scale.png from one or more JSON outputs of
// `bench-api -scale` (make bench-scale): throughput and p99 at 16 clients
// against the rows per table, each as a ratio to the empty database of the
// same run. Ratios, because runs on a shared machine differ more in their
// absolute figures than the table sizes move them; within a run the
// databases alternate and see the same noise.

type scaleFile struct {
	Scale *struct {
		Variants []struct {
			Name    string   `json:"name"`
			Prefill int64    `json:"prefill"`
			Create  []result `json:"create"`
			Replay  []result `json:"replay"`
		} `json:"variants"`
	} `json:"scale"`
}

// sizePoint is one prefilled database's medians against its run's empty one.
type sizePoint struct {
	rows                           int64
	create, replay, createP, replP float64 // ratios
}

func scalePoints(paths []string) ([]sizePoint, error) {
	var pts []sizePoint
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var f scaleFile
		if err := json.Unmarshal(raw, &f); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if f.Scale == nil {
			return nil, fmt.Errorf("%s: no -scale results", path)
		}
		var empty *sizePoint
		var prefilled []sizePoint
		for _, v := range f.Scale.Variants {
			p := sizePoint{rows: v.Prefill, create: medianOf(v.Create, rate), replay: medianOf(v.Replay, rate),
				createP: medianOf(v.Create, p99), replP: medianOf(v.Replay, p99)}
			switch {
			case v.Name == "empty":
				empty = &p
			case v.Prefill > 0:
				prefilled = append(prefilled, p)
			}
		}
		if empty == nil {
			return nil, fmt.Errorf("%s: no empty database to compare with", path)
		}
		pts = append(pts, sizePoint{rows: 0, create: 1, replay: 1, createP: 1, replP: 1})
		for _, p := range prefilled {
			pts = append(pts, sizePoint{rows: p.rows, create: p.create / empty.create, replay: p.replay / empty.replay,
				createP: p.createP / empty.createP, replP: p.replP / empty.replP})
		}
	}
	slices.SortStableFunc(pts, func(a, b sizePoint) int { return cmp.Compare(a.rows, b.rows) })
	return pts, nil
}

func rate(r result) float64 { return r.PerSecond }
func p99(r result) float64  { return float64(r.P99) / float64(time.Millisecond) }

func medianOf(rs []result, f func(result) float64) float64 {
	if len(rs) == 0 {
		return 0
	}
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func runScale(in, out string) error {
	pts, err := scalePoints(strings.Split(in, ","))
	if err != nil {
		return err
	}
	var plots []*plot.Plot
	for _, pn := range scalePanels {
		p, err := scalePanel(pts, pn.title, pn.goalName, pn.goal, pn.series)
		if err != nil {
			return err
		}
		plots = append(plots, p)
	}
	return writeSideBySide(out, plots)
}

// scalePanels are the chart's two panels: requests/s and p99, each with
// its cost-at-scale goal as a dashed line (docs/benchmarks.md).
var scalePanels = []struct {
	title, goalName string
	goal            float64
	series          []scaleSeries
}{
	{"requests/s at 16 clients, / empty tables'", "goal: at least 0.9", 0.9, []scaleSeries{
		{"new charges", func(p sizePoint) float64 { return p.create }, color.RGBA{B: 200, A: 255}},
		{"replays", func(p sizePoint) float64 { return p.replay }, color.RGBA{R: 200, A: 255}},
	}},
	{"p99 at 16 clients, / empty tables'", "goal: at most 1.5", 1.5, []scaleSeries{
		{"new charges", func(p sizePoint) float64 { return p.createP }, color.RGBA{B: 200, A: 255}},
		{"replays", func(p sizePoint) float64 { return p.replP }, color.RGBA{R: 200, A: 255}},
	}},
}

type scaleSeries struct {
	name  string
	pick  func(sizePoint) float64
	color color.RGBA
}

func scalePanel(pts []sizePoint, title, goalName string, goal float64, series []scaleSeries) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "rows in each of the four growing tables, millions"
	p.Y.Label.Text = "ratio to the same run's empty tables"
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	p.Y.Min, p.Y.Max = 0, 2
	maxRows := 0.0
	for _, s := range series {
		var xy plotter.XYs
		for _, pt := range pts {
			xy = append(xy, plotter.XY{X: float64(pt.rows) / 1e6, Y: s.pick(pt)})
			maxRows = max(maxRows, float64(pt.rows)/1e6)
			p.Y.Max = max(p.Y.Max, s.pick(pt)*1.1)
		}
		line, points, err := plotter.NewLinePoints(xy)
		if err != nil {
			return nil, err
		}
		line.Color, points.Color = s.color, s.color
		p.Add(line, points)
		p.Legend.Add(s.name, line, points)
	}
	g, err := plotter.NewLine(plotter.XYs{{X: 0, Y: goal}, {X: max(maxRows, 1), Y: goal}})
	if err != nil {
		return nil, err
	}
	g.Color = color.RGBA{G: 150, A: 255}
	g.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(g)
	p.Legend.Add(goalName, g)
	return p, nil
}
