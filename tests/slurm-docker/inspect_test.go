package slurmdocker

import (
	"encoding/json"
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/inspect"
	"github.com/gym-otel-spank/gym-otel-spank/internal/slurmkit"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// The vLLM stand-in's told values (tests/standins/README.md): the n-th
// scrape observes these latencies, in these buckets.
var (
	e2eCycle   = []float64{0.42, 0.75, 1.2, 0.31, 2.2, 0.9, 4.0, 1.7}
	e2eBounds  = []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10}
	ttftCycle  = []float64{0.03, 0.07, 0.15, 0.3, 0.045, 0.09, 0.6, 0.12}
	ttftBounds = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}
)

// told returns the cumulative buckets of the stand-in's first n
// observations of cycle (observation k = cycle[k%8], k = 1..n).
func told(n int, cycle, bounds []float64) []inspect.Bucket {
	bs := make([]inspect.Bucket, len(bounds)+1)
	for i, b := range bounds {
		bs[i].UpperBound = b
	}
	bs[len(bounds)].UpperBound = math.Inf(1)
	for k := 1; k <= n; k++ {
		v := cycle[k%len(cycle)]
		for i := range bs {
			if v <= bs[i].UpperBound {
				bs[i].Count++
			}
		}
	}
	return bs
}

// checkInspect: `inspect` of the main job's dir: both nodes' figures
// against what the stand-ins were told (each vLLM stand-in advances once
// per scrape: the n-th adds 100+7n prompt and 50+3n generation tokens and
// one observation of each cycle; n is read back from the prompt tokens),
// Gym's 6 + 2 rollouts (agent rollout 3 fails verify), and the HTML report
// in headless Chromium.
func checkInspect(t *testing.T, host, jobID string) {
	t.Helper()
	cli := filepath.Join(testenv.Root(), "build", "gym-otel-spank")
	r, text, art := slurmkit.Inspect(t, cli, host)
	html := filepath.Join(art, "report.html")

	near := func(v inspect.Value, want float64) bool { return math.Abs(float64(v)-want) < 1e-9 }
	if strings.Join(r.Job.Nodes, ",") != "c1,c2" || strings.Join(inspect.Texts(r.Job.Identity["slurm_job_id"]), ",") != jobID {
		t.Errorf("inspect: nodes %v, job %v", r.Job.Nodes, r.Job.Identity["slurm_job_id"])
	}
	if len(r.ModelServers) != 3 {
		t.Fatalf("inspect: model servers %+v", r.ModelServers)
	}
	for i, m := range r.ModelServers[:2] {
		node := fmt.Sprintf("c%d", i+1)
		// prompt = 100n + 7n(n+1)/2
		n := 0
		for k := 1; k < 100000; k++ {
			if float64(100*k+7*k*(k+1)/2) == float64(m.PromptTokens) {
				n = k
				break
			}
		}
		if m.Node != node || m.Producer != "gym-vllm/policy" || m.Model != "tiny-model" || n == 0 {
			t.Errorf("inspect: server %d: %s %s %s, prompt tokens %v (not 100n+7n(n+1)/2)", i, m.Node, m.Producer, m.Model, m.PromptTokens)
			continue
		}
		if m.GenerationTokens != inspect.Value(50*n+3*n*(n+1)/2) || m.Requests != inspect.Value(n) || m.CounterResets != 0 {
			t.Errorf("inspect: %s after %d scrapes: generation %v requests %v resets %d", node, n, m.GenerationTokens, m.Requests, m.CounterResets)
		}
		for _, h := range []struct {
			what          string
			q             inspect.Quantiles
			cycle, bounds []float64
		}{{"e2e", m.E2ELatency, e2eCycle, e2eBounds}, {"ttft", m.TTFT, ttftCycle, ttftBounds}} {
			want := func(q float64) float64 { return inspect.BucketQuantile(q, told(n, h.cycle, h.bounds)) }
			if h.q.Count != inspect.Value(n) || !near(h.q.P50, want(0.5)) || !near(h.q.P90, want(0.9)) || !near(h.q.P99, want(0.99)) {
				t.Errorf("inspect: %s %s after %d scrapes: %+v, want p50 %v p90 %v p99 %v", node, h.what, n, h.q, want(0.5), want(0.9), want(0.99))
			}
		}
		if !(m.RunningMax >= 1 && m.RunningMax <= 4) || !(m.KVCacheMax <= 0.4) || len(m.GenerationPerSec) == 0 {
			t.Errorf("inspect: %s gauges %+v", node, m)
		}
	}
	g := r.Gym
	// Agent (c1): 6 rollouts of 1010 ms, rollout 3 fails; resources (c2): 2 of 260 ms.
	if g.RolloutSpans.Count != 8 || g.Verify["pass"] != 7 || g.Verify["fail"] != 1 || g.VerifySpans["fail"] != 1 || !near(g.VerifySuccess, 0.875) {
		t.Errorf("inspect: gym %+v", g)
	}
	// 2 in (250, 500], 6 in (1000, 2500]: p50 rank 4 = 1000+1500*(2/6) and
	// p99 = 1000+1500*(5.92/6) by the buckets, both above the largest
	// rollout (about 1010 ms), so clamped to the points' max; min is the
	// shortest rollout (about 260 ms).
	if h := g.RolloutHistogram; h.Count != 8 || !(h.Max >= 1010 && h.Max < 1400) || !(h.Min >= 260 && h.Min < 500) ||
		!near(h.P50, math.Min(1000+1500*2.0/6, float64(h.Max))) || !near(h.P99, math.Min(1000+1500*5.92/6, float64(h.Max))) {
		t.Errorf("inspect: rollout histogram %+v, want p50 and p99 clamped to max", h)
	}
	if len(r.Hosts) != 2 || r.Hosts[0].Node != "c1" || r.Hosts[1].Node != "c2" || r.Hosts[0].CPUs < 1 || !r.Hosts[1].MemoryTotal.Known() {
		t.Errorf("inspect: hosts %+v", r.Hosts)
	}
	if r.Errors.Spans != 0 || r.Errors.Logs != 0 || r.Health.BadLines != 0 {
		t.Errorf("inspect: errors %+v, bad lines %d", r.Errors, r.Health.BadLines)
	}
	if len(r.Receipts) != 2 || len(r.Trouble) != 0 {
		t.Errorf("inspect: receipts %+v trouble %v", r.Receipts, r.Trouble)
	}
	for i, l := range strings.Split(string(text), "\n") {
		if len([]rune(l)) > inspect.Width {
			t.Errorf("inspect: text line %d has %d columns", i+1, len([]rune(l)))
		}
	}
	testenv.CheckPage(t, html, filepath.Join(art, "report.png"), "chart-throughput", "chart-queue", "chart-kvcache",
		"chart-rollouts", "chart-e2e-0", "chart-e2e-1", "chart-ttft-0", "chart-ttft-1")
}

// checkInspectBackendDown: for a job whose backend was down, inspect says
// so in its first lines, for each node (before any section), and still
// reports the run from the files.
func checkInspectBackendDown(t *testing.T, host string) {
	t.Helper()
	cli := filepath.Join(testenv.Root(), "build", "gym-otel-spank")
	text, err := exec.Command(cli, "inspect", host).CombinedOutput()
	if err != nil {
		t.Fatalf("inspect: %v %s", err, text)
	}
	t.Logf("inspect:\n%s", text)
	first, _, _ := strings.Cut(string(text), "\n== job")
	// From the receipt (LOST: ...) when the collector drained in time; in
	// any case from the supervisor's export problems in state.json (a
	// collector killed at the shutdown bound leaves a receipt of lower
	// bounds only).
	for _, n := range []string{"c1", "c2"} {
		if !strings.Contains(first, "! "+n+": LOST: the backend did not get") &&
			!strings.Contains(first, "! "+n+": the collector reported export problems: the backend refused") {
			t.Errorf("inspect's first lines do not say the backend lost data of %s:\n%s", n, first)
		}
	}
	out, err := exec.Command(cli, "inspect", "--json", host).Output()
	if err != nil {
		t.Fatal(err)
	}
	var r inspect.Report
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Trouble) < 2 || r.Gym.RolloutSpans.Count != 3 || len(r.ModelServers) != 3 {
		t.Errorf("inspect --json: trouble %v, rollouts %v, %d model servers", r.Trouble, r.Gym.RolloutSpans.Count, len(r.ModelServers))
	}
}
