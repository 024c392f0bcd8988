// Command bench-chart draws docs/bench-api.png from the JSON that
// `make bench-api` writes: latency percentiles (p50, p99) against
// concurrency, for new charges and replays, the service beside pgbench
// running the same statements. It is a module of its own, so the plotting
// library stays out of the service's dependencies.
//
//	go run . -in ../../bench-api.json -out ../../docs/bench-api.png
//
// With -scale it draws docs/bench-scale.png instead, from one or more
// outputs of `bench-api -scale` (scale.go).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

type result struct {
	PerSecond float64       `json:"perSecond"`
	P50       time.Duration `json:"p50"`
	P99       time.Duration `json:"p99"`
}

type row struct {
	Workload    string  `json:"workload"`
	Concurrency int     `json:"concurrency"`
	Service     result  `json:"service"`
	Ceiling     *result `json:"ceiling"`
}

type table struct {
	Rows []row `json:"rows"`
}

func main() {
	in := flag.String("in", "bench-api.json", "the JSON bench-api wrote")
	out := flag.String("out", "bench-api.png", "the PNG to write")
	scale := flag.Bool("scale", false, "draw throughput and p99 against table size from bench-api -scale outputs (-in: a comma-separated list)")
	flag.Parse()
	render := run
	if *scale {
		render = runScale
	}
	if err := render(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "bench-chart:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	raw, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var t table
	if err := json.Unmarshal(raw, &t); err != nil {
		return err
	}
	var panels []*plot.Plot
	for _, workload := range []string{"create", "replay"} {
		p, err := panel(t, workload)
		if err != nil {
			return err
		}
		panels = append(panels, p)
	}
	return writeSideBySide(out, panels)
}

// writeSideBySide draws panels side by side into the PNG out.
func writeSideBySide(out string, panels []*plot.Plot) error {
	const w, h = 16 * vg.Centimeter, 10 * vg.Centimeter
	img := vgimg.New(vg.Length(len(panels))*w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(panels), PadX: vg.Centimeter, PadY: vg.Centimeter / 2, PadTop: vg.Centimeter / 4, PadBottom: vg.Centimeter / 4, PadLeft: vg.Centimeter / 4, PadRight: vg.Centimeter / 4}
	for i, p := range panels {
		p.Draw(tiles.At(dc, i, 0))
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(f)
	return err
}

func panel(t table, workload string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "POST /payments, " + map[string]string{"create": "new charges", "replay": "replays"}[workload]
	p.X.Label.Text = "concurrent clients"
	p.Y.Label.Text = "latency, ms (log scale)"
	p.X.Scale = plot.LogScale{}
	p.Y.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 1, Label: "1"}, {Value: 4, Label: "4"}, {Value: 16, Label: "16"}, {Value: 64, Label: "64"}})
	var yTicks []plot.Tick
	for _, v := range []float64{0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000} {
		yTicks = append(yTicks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	p.Y.Tick.Marker = plot.ConstantTicks(yTicks)
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())

	series := []struct {
		name  string
		pick  func(r row) (result, bool)
		p99   bool
		color color.RGBA
		dash  bool
	}{
		{"service p50", func(r row) (result, bool) { return r.Service, true }, false, color.RGBA{B: 200, A: 255}, false},
		{"service p99", func(r row) (result, bool) { return r.Service, true }, true, color.RGBA{B: 200, A: 255}, true},
		{"pgbench p50", func(r row) (result, bool) { return deref(r.Ceiling) }, false, color.RGBA{R: 200, A: 255}, false},
		{"pgbench p99", func(r row) (result, bool) { return deref(r.Ceiling) }, true, color.RGBA{R: 200, A: 255}, true},
	}
	// Explicit ranges: a log axis cannot start at 0, and a panel may have
	// one point only.
	p.X.Min, p.X.Max = 0.7, 100
	p.Y.Min, p.Y.Max = math.Inf(1), 0
	for _, s := range series {
		var pts plotter.XYs
		for _, r := range t.Rows {
			res, ok := s.pick(r)
			if r.Workload != workload || !ok {
				continue
			}
			d := res.P50
			if s.p99 {
				d = res.P99
			}
			if d > 0 {
				pts = append(pts, plotter.XY{X: float64(r.Concurrency), Y: float64(d) / float64(time.Millisecond)})
			}
		}
		if len(pts) == 0 {
			continue
		}
		for _, pt := range pts {
			p.Y.Min, p.Y.Max = math.Min(p.Y.Min, pt.Y/1.5), math.Max(p.Y.Max, pt.Y*1.5)
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, err
		}
		line.Color, points.Color = s.color, s.color
		if s.dash {
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(line, points)
		p.Legend.Add(s.name, line, points)
	}
	return p, nil
}

func deref(r *result) (result, bool) {
	if r == nil {
		return result{}, false
	}
	return *r, true
}
