package supervise_test

import (
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/inspect"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/helper/supervise"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
)

// TestEnergyMetricsLine: a node's figures per step as the drain appends
// them: the measured figure of step 0 (trusted) and the batch step's (not
// trusted) as gym_otel.gpu.energy, a MIG estimate as
// gym_otel.gpu.energy.estimate with its method, each point spanning its
// window, under the run's identity; a step without a figure gives none.
func TestEnergyMetricsLine(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	at := func(s int) *time.Time { x := t0.Add(time.Duration(s) * time.Second); return &x }
	steps := []inspect.StepEnergy{
		{Node: "gn1", Step: "0", Start: at(2), End: at(10), GPUEnergy: inspect.GPUEnergy{Joules: 4000, Source: inspect.SourceEnergyCounter, Verdict: inspect.Verdict{Trusted: true}}},
		{Node: "gn1", Step: "batch", Start: at(1), End: at(17), GPUEnergy: inspect.GPUEnergy{Joules: 8000, Source: inspect.SourcePower,
			Verdict: inspect.Verdict{Why: []string{inspect.ReasonGap + ": gn1 GPU-a 5.0 s"}}}},
		{Node: "gn1", Step: "1", Start: at(10), End: at(15), GPUEnergy: inspect.GPUEnergy{Joules: inspect.Value(math.NaN()),
			Estimate: &inspect.Estimate{Joules: 1500, Method: inspect.MethodMIGShare + ": UUID GPU-a: 3/7 (GI 2 3g.40gb)", Verdict: inspect.Verdict{Trusted: true}}}},
		{Node: "gn1", Step: "2", Start: at(15), End: at(16), GPUEnergy: inspect.GPUEnergy{Joules: inspect.Value(math.NaN())}},
	}
	id := []render.Attr{{Key: "service.name", Value: "slurm"}, {Key: "run_id", Value: "run-7"}, {Key: "slurm_job_id", Value: "42", Int: true}}
	line, points, err := supervise.EnergyMetricsLine(id, steps, []string{"policy"})
	if err != nil || points != 3 {
		t.Fatalf("EnergyMetricsLine: %d points, %v", points, err)
	}
	if !strings.Contains(string(line), `"unit":"J"`) {
		t.Errorf("no unit J: %s", line)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "metrics.jsonl"), line, 0o600); err != nil {
		t.Fatal(err)
	}
	d := otlptest.MustRead(t, dir, "metrics")
	m := d.Named(vocab.GPUEnergy)
	if len(m) != 1 || m[0].Gauge == nil || len(m[0].Gauge.DataPoints) != 2 {
		t.Fatalf("%s: %+v", vocab.GPUEnergy, m)
	}
	if r, _ := m[0].Resource.Str("run_id"); r != "run-7" {
		t.Errorf("resource %v: want the run's identity", m[0].Resource)
	}
	p0, pb := m[0].Gauge.DataPoints[0], m[0].Gauge.DataPoints[1]
	if p0.Value() != 4000 || !p0.At().Equal(*at(10)) || p0.Attributes.Text()[vocab.AttrStepID] != "0" || p0.Attributes.Text()[vocab.AttrEnergyRole] != "policy" ||
		p0.Attributes.Text()[vocab.AttrEnergySource] != "counter" || p0.Attributes.Text()[vocab.AttrEnergyTrusted] != "true" {
		t.Errorf("step 0: %+v %v", p0, p0.Attributes.Text())
	}
	if pb.Value() != 8000 || pb.Attributes.Text()[vocab.AttrEnergyTrusted] != "false" || pb.Attributes.Text()[vocab.AttrEnergySource] != "power" ||
		pb.Attributes.Text()[vocab.AttrEnergyWhy] == "" {
		t.Errorf("batch: %+v %v", pb, pb.Attributes.Text())
	}
	e := d.Named(vocab.GPUEnergyEstimate)
	if len(e) != 1 || len(e[0].Gauge.DataPoints) != 1 || e[0].Gauge.DataPoints[0].Value() != 1500 ||
		e[0].Gauge.DataPoints[0].Attributes.Text()[vocab.AttrEnergyMethod] == "" {
		t.Fatalf("%s: %+v", vocab.GPUEnergyEstimate, e)
	}
	if line, points, err := supervise.EnergyMetricsLine(id, steps[3:], nil); line != nil || points != 0 || err != nil {
		t.Errorf("no figure: %q, %d, %v", line, points, err)
	}
}
