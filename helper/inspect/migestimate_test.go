package inspect

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
)

// TestMIGEstimate: two MIG instances of the job's on one parent GPU
// (3g.40gb and 2g.20gb) whose series repeat the parent's energy counter, as
// dcgm-exporter serves them, and a whole GPU of the job's: the parent is
// counted once, times 5/7, the whole GPU whole; the measured figure stays
// refused. An instance of another tenant's (shared) gives no estimate.
func TestMIGEstimate(t *testing.T) {
	// The parent's counter: 7000 J over 10 s (mJ since boot); the whole
	// GPU's: 2000 J.
	parent := func() *sampled {
		return &sampled{stride: 1, pts: []sample{{ms: 1000, v: 5e9}, {ms: 6000, v: 5e9 + 3.5e6}, {ms: 11000, v: 5e9 + 7e6}}}
	}
	whole := &sampled{stride: 1, pts: []sample{{ms: 1000, v: 1e6}, {ms: 11000, v: 3e6}}}
	inst := func(gi, profile string) *gpuSeries {
		return &gpuSeries{dev: gpuDevice{"gn1", "0", gi}, id: "UUID GPU-a instance " + gi, by: "UUID", why: whyJobInstance, jobInstance: true,
			parent: "UUID GPU-a", profile: profile, model: "NVIDIA H100 80GB HBM3", counterSamples: parent()}
	}
	gpus := []*gpuSeries{inst("1", "3g.40gb"), inst("2", "2g.20gb"),
		{dev: gpuDevice{"gn1", "1", ""}, id: "UUID GPU-b", by: "UUID", parent: "UUID GPU-b", counterSamples: whole}}
	f := gpusOver("gn1", gpus, 1000, 11000)
	if f.Joules.Known() || f.Verdict.Trusted || f.Estimate == nil {
		t.Fatalf("figure %+v: want the measured figure refused and an estimate", f)
	}
	if want := 7000.0*5/7 + 2000; math.Abs(float64(f.Estimate.Joules)-want) > 1e-6 {
		t.Errorf("estimate %v J, want %v (the parent once, times 5/7, and the whole GPU)", f.Estimate.Joules, want)
	}
	if !strings.HasPrefix(f.Estimate.Method, MethodMIGShare) || !strings.Contains(f.Estimate.Method, "UUID GPU-a: 5/7 (GI 1 3g.40gb, GI 2 2g.20gb)") || !f.Estimate.Verdict.Trusted {
		t.Errorf("estimate %+v: want its method with the shares, and the parent's trusted verdict", f.Estimate)
	}
	// On an A30 a GPU has 4 slices.
	a30 := inst("1", "2g.12gb")
	a30.model = "NVIDIA A30"
	if f := gpusOver("gn1", []*gpuSeries{a30}, 1000, 11000); f.Estimate == nil || math.Abs(float64(f.Estimate.Joules)-3500) > 1e-6 {
		t.Errorf("A30 2g.12gb: %+v, want 7000 J x 2/4", f.Estimate)
	}
	// A window the parent's samples do not bracket: the estimate's verdict
	// says so.
	if f := gpusOver("gn1", []*gpuSeries{inst("1", "3g.40gb")}, 500, 11000); f.Estimate == nil || f.Estimate.Verdict.Trusted {
		t.Errorf("not bracketed: %+v, want an untrusted estimate", f.Estimate)
	}
	// Another tenant's instance kept (Slurm named MIG UUIDs only): which
	// is the job's cannot be told, no estimate.
	shared := inst("2", "3g.40gb")
	shared.jobInstance, shared.why = false, "shared: a MIG instance Slurm could not name exactly"
	if f := gpusOver("gn1", []*gpuSeries{inst("1", "3g.40gb"), shared}, 1000, 11000); f.Estimate != nil {
		t.Errorf("shared instance: estimate %+v, want none", f.Estimate)
	}
}

// TestMIGEstimateHTML: the real collector's files of a MIG instance of the
// job's (testdata/gpus/mig-exact): the HTML's energy table gives the
// estimate beside the refusal, labelled; the shared instances'
// (mig-uuid) none.
func TestMIGEstimateHTML(t *testing.T) {
	for name, want := range map[string]bool{"mig-exact": true, "mig-uuid": false} {
		r, err := Build(filepath.Join("testdata", "gpus", name, "otel"))
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		if err := r.WriteHTML(&b, nil); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(b.String(), "AN ESTIMATE by the MIG share of the parent GPU"); got != want {
			t.Errorf("%s: estimate in the HTML %v, want %v", name, got, want)
		}
	}
}
