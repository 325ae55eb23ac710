package supervise

import (
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"os"
	"path/filepath"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
	"github.com/sirupsen/logrus"
)

// TestAppendEnergyMetrics: a node dir as the collector wrote it (two GPUs
// of the job's serving dcgm-exporter's energy counter at 300 W and 200 W,
// the batch script from 2.5 s to 17.5 s and step 0 from 5 s to 13 s, the
// policy's vLLM counter; testdata/energy-gn1, written by inspect's
// TestStepEnergy's builder): at the drain the supervisor computes the
// figures as inspect does and appends them to metrics.jsonl, noted for
// the receipt: 8000 J over the batch script (its bracketing samples 2 s
// to 18 s: 16 s x 500 W) and 4000 J over step 0 (8 s x 500 W), both
// trusted, role policy. Without dcgm-exporter scraped nothing is read.
func TestAppendEnergyMetrics(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"metrics.jsonl", "traces.jsonl"} {
		b, err := os.ReadFile(filepath.Join("testdata", "energy-gn1", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	s := &supervisor{out: dir, log: logrus.New(), o: config.Otel{GPUMetricsPort: 9400},
		opt: Options{SpanCountMaxBytes: SpanCountMaxBytes, Facts: jobfacts.Facts{JobID: "42", Node: "gn1"}}}
	id := []render.Attr{{Key: "service.name", Value: "slurm"}, {Key: "run_id", Value: "r1"}}
	al, ok := s.appendEnergyMetrics(id)
	if !ok || len(s.appended) != 1 || s.appended[0].Points != 2 || s.appended[0].Offset != int64(len(before)) {
		t.Fatalf("appended %v %+v", ok, s.appended)
	}
	if al.signal != "metrics" {
		t.Errorf("line of %q", al.signal)
	}
	// Only the appended line.
	line := filepath.Join(t.TempDir(), "metrics.jsonl")
	os.WriteFile(line, al.line, 0o600)
	d := otlptest.MustRead(t, filepath.Dir(line), "metrics")
	m := d.Named(vocab.GPUEnergy)
	if len(m) != 1 || m[0].Gauge == nil || len(m[0].Gauge.DataPoints) != 2 {
		t.Fatalf("%s: %+v", vocab.GPUEnergy, m)
	}
	want := map[string]float64{"batch": 8000, "0": 4000}
	for _, p := range m[0].Gauge.DataPoints {
		a := p.Attributes.Text()
		if w, ok := want[a[vocab.AttrStepID]]; !ok || p.Value() < w-1e-6 || p.Value() > w+1e-6 || a[vocab.AttrEnergyTrusted] != "true" || a[vocab.AttrEnergyRole] != "policy" || a[vocab.AttrEnergySource] != "counter" {
			t.Errorf("point %v = %v J", a, p.Value())
		}
		delete(want, a[vocab.AttrStepID])
	}
	if len(want) != 0 {
		t.Errorf("steps without a point: %v", want)
	}

	s2 := &supervisor{out: dir, log: logrus.New(), opt: Options{SpanCountMaxBytes: SpanCountMaxBytes, Facts: jobfacts.Facts{Node: "gn1"}}}
	if _, ok := s2.appendEnergyMetrics(id); ok || len(s2.appended) != 0 {
		t.Errorf("without dcgm-exporter: appended %+v", s2.appended)
	}
	s3 := &supervisor{out: dir, log: logrus.New(), o: config.Otel{GPUMetricsPort: 9400}, opt: Options{SpanCountMaxBytes: 1000, Facts: jobfacts.Facts{Node: "gn1"}}}
	if _, ok := s3.appendEnergyMetrics(id); ok || len(s3.appended) != 0 {
		t.Errorf("over the bound: appended %+v", s3.appended)
	}
}
