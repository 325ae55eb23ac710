package inspect

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gpuPoint is one dcgm-exporter point of GPU gpu (instance gi, "" for a
// whole GPU) marked attribution ("" for none), as the collector writes it.
func gpuPoint(name string, sum bool, gpu, gi, attribution string, sec int, v float64) string {
	as := []string{fmt.Sprintf(`{"key":"gpu","value":{"stringValue":%q}}`, gpu), `{"key":"modelName","value":{"stringValue":"H100"}}`}
	if gi != "" {
		as = append(as, fmt.Sprintf(`{"key":"GPU_I_ID","value":{"stringValue":%q}},{"key":"GPU_I_PROFILE","value":{"stringValue":"3g.40gb"}}`, gi))
	}
	if attribution != "" {
		as = append(as, fmt.Sprintf(`{"key":"gpu_attribution","value":{"stringValue":%q}}`, attribution))
	}
	dp := fmt.Sprintf(`{"dataPoints":[{"attributes":[%s],"timeUnixNano":"%d","asDouble":%v}]`, strings.Join(as, ","), ns(sec), v)
	if sum {
		return fmt.Sprintf(`{"name":%q,"sum":%s,"aggregationTemporality":2,"isMonotonic":true}}`, name, dp)
	}
	return fmt.Sprintf(`{"name":%q,"gauge":%s}}`, name, dp)
}

func metricsLine(node, producer string, ms ...string) string {
	return fmt.Sprintf(`{"resourceMetrics":[{"resource":%s,"scopeMetrics":[{"metrics":[%s]}]}]}`+"\n", res(node, producer, node+":9400"), strings.Join(ms, ","))
}

func genTokens(node string, sec int, v float64) string {
	return metricsLine(node, "gym-vllm/policy", fmt.Sprintf(`{"name":"vllm_generation_tokens_total","sum":{"dataPoints":[{"attributes":[%s],"timeUnixNano":"%d","asDouble":%v}],"aggregationTemporality":2,"isMonotonic":true}}`, vl, ns(sec), v))
}

func rolloutsDone(node string, sec int, outcome string, v float64) string {
	return metricsLine(node, "nemo-gym/agent", fmt.Sprintf(`{"name":"gym.rollout.completed_total","sum":{"dataPoints":[{"attributes":[{"key":"nemo.gym.rollout.outcome","value":{"stringValue":%q}}],"timeUnixNano":"%d","asInt":"%d"}],"aggregationTemporality":2,"isMonotonic":true}}`, outcome, ns(sec), int(v)))
}

func writeFiles(t *testing.T, metrics string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "otel")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte(metrics), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestEnergyFigures: GPU 0 has DCGM's energy counter (mJ since boot, one
// reset), GPU 1 only its power (integrated over the scrape times); 2,000
// generation tokens on two servers, 8 rollouts by Gym's counter.
func TestEnergyFigures(t *testing.T) {
	var b strings.Builder
	// GPU 0: 5e9 mJ since boot, +300 J in 10 s, then a reset to 100 J
	// (+100 J counted from zero): 400 J.
	for _, p := range []struct {
		sec int
		mj  float64
	}{{0, 5e9}, {10, 5e9 + 300e3}, {20, 100e3}} {
		b.WriteString(metricsLine("gn1", "dcgm", gpuPoint(mEnergy, true, "0", "", "job", p.sec, p.mj), gpuPoint(mPower, false, "0", "", "job", p.sec, 999)))
	}
	// GPU 1: 100 W, 200 W, 200 W at 0, 10, 20 s: 1500 + 2000 = 3500 J.
	for i, w := range []float64{100, 200, 200} {
		b.WriteString(metricsLine("gn1", "dcgm", gpuPoint(mPower, false, "1", "", "job", i*10, w)))
	}
	b.WriteString(genTokens("gn1", 0, 0))
	b.WriteString(genTokens("gn1", 20, 1500))
	b.WriteString(genTokens("gn2", 20, 500))
	b.WriteString(rolloutsDone("gn1", 20, "scored", 6))
	b.WriteString(rolloutsDone("gn1", 20, "dropped", 2))
	r, err := Build(writeFiles(t, b.String()))
	if err != nil {
		t.Fatal(err)
	}
	e := r.Energy
	if !near(e.Joules, 3900) || !near(e.WindowSeconds, 20) || e.GPUs != 2 || len(e.NotAttributable) > 0 {
		t.Fatalf("energy %+v, want 3900 J over 20 s on 2 GPUs", e)
	}
	if e.Source != SourceEnergyCounter+" + "+SourcePower {
		t.Errorf("source %q", e.Source)
	}
	if !near(e.GenerationTokens, 2000) || !near(e.JoulesPer1kTokens, 1950) {
		t.Errorf("tokens %v, per 1k %v; want 2000 and 1950 J", e.GenerationTokens, e.JoulesPer1kTokens)
	}
	if !near(e.Rollouts, 8) || e.RolloutsSource != mRolloutDone || !near(e.JoulesPerRollout, 487.5) {
		t.Errorf("rollouts %v (%s), per rollout %v; want 8 and 487.5 J", e.Rollouts, e.RolloutsSource, e.JoulesPerRollout)
	}
	var text strings.Builder
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"== energy (dcgm-exporter)", "3900.0 J", "per 1,000 tokens         1950.00 J", "per rollout              487.50 J (8 rollouts, gym.rollout.completed_total)"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
}

// TestEnergyNotAttributable: on a MIG instance, a shared GPU, a GPU Slurm
// did not name or files without gpu_attribution, no figure is printed.
func TestEnergyNotAttributable(t *testing.T) {
	for _, c := range []struct {
		name, gi, attribution, why string
	}{
		{"mig", "1", "mig", "a MIG instance of the job's"},
		{"mig shared", "2", "shared", "shared: a MIG instance Slurm could not name exactly"},
		{"whole shared", "", "shared", "shared: Slurm named it by an index"},
		{"unnamed", "", "unnamed", "not named by Slurm"},
		{"no attribute", "", "", "not marked gpu_attribution"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b strings.Builder
			for i, w := range []float64{100, 200} {
				b.WriteString(metricsLine("gn1", "dcgm", gpuPoint(mPower, false, "0", c.gi, c.attribution, i*10, w),
					gpuPoint(mGPUUtil, false, "0", c.gi, c.attribution, i*10, 50)))
			}
			b.WriteString(genTokens("gn1", 0, 0))
			b.WriteString(genTokens("gn1", 10, 1000))
			r, err := Build(writeFiles(t, b.String()))
			if err != nil {
				t.Fatal(err)
			}
			e := r.Energy
			if e.Joules.Known() || e.JoulesPer1kTokens.Known() || e.Why != WhyNotAttributable {
				t.Errorf("energy %+v: want no figure, %q", e, WhyNotAttributable)
			}
			if len(r.GPUSharing) != 1 || !strings.Contains(r.GPUSharing[0], c.why) {
				t.Errorf("gpu sharing %q, want %q", r.GPUSharing, c.why)
			}
			var text strings.Builder
			if err := r.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			if c.attribution == "mig" {
				// The job's own MIG instance (3g.40gb): the parent's 1500 J
				// (100 to 200 W over 10 s) times 3/7, an estimate, not
				// trusted (10 s between power samples).
				x := e.Estimate
				if x == nil || math.Abs(float64(x.Joules)-1500*3.0/7) > 1e-6 || x.Verdict.Trusted || !strings.HasPrefix(x.Method, MethodMIGShare) ||
					math.Abs(float64(e.EstimatePer1kTokens)-1500*3.0/7) > 1e-6 {
					t.Errorf("estimate %+v (%v per 1,000 tokens): want 642.86 J by the MIG share, not trusted", x, e.EstimatePer1kTokens)
				}
				if !strings.Contains(text.String(), "estimate                 642.9 J, AN ESTIMATE by the MIG share") {
					t.Errorf("text without the estimate:\n%s", text.String())
				}
				return
			}
			if e.Estimate != nil {
				t.Errorf("estimate %+v where the instances are not the job's own", e.Estimate)
			}
			if !strings.Contains(text.String(), "energy                   cannot be attributed to the job") || strings.Contains(text.String(), " J ") {
				t.Errorf("text:\n%s", text.String())
			}
		})
	}
}
