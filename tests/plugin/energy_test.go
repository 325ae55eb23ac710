package plugin_test

import (
	"encoding/json"
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/gpudev"
	"github.com/gym-otel-spank/gym-otel-spank/helper/inspect"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
	"github.com/gym-otel-spank/gym-otel-spank/internal/slurmkit"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// energyCurve is a GPU's power curve as the dcgm stand-in's --curve draws
// it: base + amp sin(2 pi t / period) W, t the seconds since its epoch.
type energyCurve struct{ base, amp, period float64 }

// joules is the curve's integral between two instants (J).
func (c energyCurve) joules(epoch time.Time, a, b time.Time) float64 {
	w := 2 * math.Pi / c.period
	t0, t1 := a.Sub(epoch).Seconds(), b.Sub(epoch).Seconds()
	return c.base*(t1-t0) + c.amp/w*(math.Cos(w*t0)-math.Cos(w*t1))
}

// TestEnergyPerStep: a two-node job with two Slurm steps and two Gym
// roles on real Slurm with GPU GRES (up.sh --gpus 2: every node's
// --gres=gpu:2 is its GRES indexes 0,1, device files of minors 0 and 1 on
// gn1, 2 and 3 on gn2). The dcgm stand-in, the nodes' dcgm-exporter,
// serves four GPUs with known power curves; the tests' build of the core
// (tag gymotel_nvidia_test) gives each node a driver tree of its own in
// which the job's minors are, on gn1, the stand-in's GPUs 3 and 2 (buses
// 0x1B, 0x1A) and, on gn2, its GPUs 1 and 0 (gn2's minors 0 and 1 are
// GPUs 3 and 2): matched by index order each node would keep GPUs 0 and
// 1, with the index read as the minor gn2 would keep GPUs 3 and 2.
//
//   - gn1's GPUs (role policy, vLLM stand-in on node pool n0) draw a fast
//     curve, 300 + 100 sin(2 pi t / 4 s) W, against a scrape every 1 s, and
//     serve dcgm-exporter's energy counter (mJ since the driver loaded):
//     their figures come from the counter, exact between any two reads;
//   - gn2's GPUs (role judge, on n1) serve power only, a slow curve, 200 +
//     50 sin(2 pi t / 120 s) W: integrating 1 s samples of it is exact to
//     far below 1 %, which a 4 s curve would not be.
//
// Step 0 sends 16 requests to each role's server, step 1 8 more; in step
// 1 the stand-in answers no scrape for 5.5 s (a gap), after which gn1's
// GPU 2's counter restarts from zero (a driver reload).
//
// Expected, in inspect's JSON: each node's step figures within 2 % of the
// curves' integral between the samples that bracket the step (read from
// the node's files), the window's own integral inside the figure's bound
// for the counter; step 0 trusted on both nodes; step 1 refused on gn1
// for the counter's reset and on gn2 for the gap above 3 s; the same per
// role, with the role's generation tokens (sum of 50+3n over its
// requests: 1208 in step 0, 892 in step 1) and joules per 1,000 of them;
// and the text names both reasons.
func TestEnergyPerStep(t *testing.T) {
	waitIdle(t)
	for _, name := range []string{"vllm-standin"} {
		p := testenv.Standin(t, name)
		if out, err := run("install", "-m", "0755", p, filepath.Join(plugDir, name)); err != nil {
			t.Fatalf("install %s: %v %s", p, err, out)
		}
	}
	d := markerDir(t, "energy")
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	base := filepath.Join(os.TempDir(), "gym-otel"+instance+"-energy-"+tag)
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(base, 0o755)
	t.Cleanup(func() { os.RemoveAll(base) })

	// Each node's driver: minor m is the stand-in's GPU driver[node][m].
	// The job's GRES indexes 0 and 1 are, on gn1, minors 0 and 1 (the
	// stand-in's GPUs 3 and 2) and, on gn2, whose gres.conf line names
	// minors 2 and 3, the stand-in's GPUs 1 and 0: gn2's minors 0 and 1
	// (GPUs 3 and 2) are what an index read as a minor would keep.
	driver := map[string]map[int]int{"gn1": {0: 3, 1: 2}, "gn2": {2: 1, 3: 0, 0: 3, 1: 2}}
	gpuOf := map[string][]int{"gn1": {3, 2}, "gn2": {1, 0}}
	minorsOf := map[string][]int{"gn1": {0, 1}, "gn2": {2, 3}}
	for node, gs := range driver {
		for minor, g := range gs {
			testenv.NvidiaGPU(t, filepath.Join(base, "nvidia", node), fmt.Sprintf("0000:%02x:00.0", 0x18+g), minor,
				fmt.Sprintf("GPU-5fd4c1a0-0000-4000-8000-%012d", g))
		}
	}
	_ = filepath.Walk(base, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	so := filepath.Join(base, "gym_otel_core.so")
	build := exec.Command("go", "build", "-buildmode=c-shared", "-tags", "gymotel_nvidia_test",
		"-ldflags", "-X github.com/gym-otel-spank/gym-otel-spank/helper/callbacks.testNvidiaRoot="+filepath.Join(base, "nvidia", "%n"), "-o", so, "./spank/core")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_LDFLAGS=-Wl,-z,nodelete")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the tests' core: %v\n%s", err, out)
	}
	_ = os.Chmod(so, 0o755)
	conf := filepath.Join(base, "plugstack.conf")
	if err := os.WriteFile(conf, []byte(strings.TrimSuffix(goodConf, "\n")+" core="+so+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := clusterConf
	clusterConf = conf
	err := upCluster()
	clusterConf = old
	t.Cleanup(func() {
		if err := upCluster(); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	waitIdle(t)

	// The nodes' dcgm-exporter: one stand-in on the loopback the nodes
	// share, both nodes' collectors scrape it and keep their own GPUs.
	curves := map[int]energyCurve{0: {200, 50, 120}, 1: {200, 50, 120}, 2: {300, 100, 4}, 3: {300, 100, 4}}
	epoch := time.Now()
	dcgmPort := shifted(18171)
	pause, reset := filepath.Join(d, "pause"), filepath.Join(d, "reset")
	harness.StartProc(t, "dcgm-standin", nil, testenv.Standin(t, "dcgm-standin"), "--port", dcgmPort, "--gpus", "0,1,2,3",
		"--energy", "--energy-gpus", "2,3", "--curve", "2,3=300:100:4", "--curve", "0,1=200:50:120", "--epoch", strconv.FormatInt(epoch.UnixNano(), 10),
		"--pause-file", pause, "--reset-file", reset, "--reset-gpus", "2", "--scrape-log", filepath.Join(d, "dcgm-scrapes"))
	harness.WaitFor(t, 10*time.Second, "dcgm-standin", func() bool { return harness.HTTPOK("http://127.0.0.1:" + dcgmPort + "/metrics") })

	vllmBase, _ := strconv.Atoi(shifted(18172))
	cfg := fmt.Sprintf(`compute:
  gymtest:
    node_pools:
      n0: {nodes: 1}
      n1: {nodes: 1}
driver:
  gym_install: /opt/gym
job:
  output_path: %[1]s/run
otel:
  gpu_metrics_port: %[2]s
services:
  policy:
    type: vllm
    port: %[3]d
    served_model_name: tiny-model
    node_pool: n0
  judge:
    type: vllm
    port: %[4]d
    served_model_name: tiny-model
    node_pool: n1
`, d, dcgmPort, vllmBase, vllmBase+1)
	if err := os.WriteFile(filepath.Join(d, "gym.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// scraped FILE N: wait for N more scrapes in FILE's log.
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf(`
D=%[1]s
lines() { cat "$1" 2>/dev/null | wc -l; }
scraped() { n=$(lines $1); for i in $(seq 1 600); do [ $(lines $1) -ge $((n + $2)) ] && return; sleep 0.1; done; echo "no scrape of $1" >&2; exit 5; }
%[2]s/vllm-standin --port %[3]d --model tiny-model --count-on request --scrape-log $D/vllm0 & p0=$!
%[2]s/vllm-standin --port %[4]d --model tiny-model --count-on request --scrape-log $D/vllm1 & p1=$!
scraped $D/vllm0 2; scraped $D/vllm1 2; scraped $D/dcgm-scrapes 4
export D
srun -N2 --ntasks-per-node=1 bash -c '
  port=$((%[3]d + SLURM_NODEID))
  for i in $(seq 1 16); do curl -sf -XPOST http://127.0.0.1:$port/v1/completions >/dev/null || exit 3; done
  sleep 10' || exit 6
scraped $D/vllm0 2; scraped $D/vllm1 2; scraped $D/dcgm-scrapes 4
srun -N2 --ntasks-per-node=1 bash -c '
  port=$((%[3]d + SLURM_NODEID))
  for i in $(seq 1 8); do curl -sf -XPOST http://127.0.0.1:$port/v1/completions >/dev/null || exit 3; done
  if [ $SLURM_NODEID = 0 ]; then
    sleep 2; touch $D/pause; sleep 5.5; rm -f $D/pause; sleep 2; touch $D/reset; sleep 4
  else
    sleep 14
  fi' || exit 7
scraped $D/vllm0 2; scraped $D/vllm1 2; scraped $D/dcgm-scrapes 4
kill $p0 $p1
wait
`, d, plugDir, vllmBase, vllmBase+1))
	r := asUser(t, 5*time.Minute, tokenEnv(), fmt.Sprintf("sbatch -N2 --gres=gpu:2 --wait --gym-otel=config=%s/gym.yaml -o %s/job.out %s", d, d, script))
	if r.code != 0 {
		out, _ := os.ReadFile(d + "/job.out")
		t.Fatalf("exit %d: %s\n%s", r.code, r.stderr, out)
	}
	waitNoCollector(t)

	cli := filepath.Join(root, "build", "gym-otel-spank")
	rep, text, art := slurmkit.Inspect(t, cli, filepath.Join(d, "run"))

	// Each node's samples of its GPUs, by the stand-in's GPU index: the
	// counter on gn1, power on gn2 (unix ms, as inspect reads them).
	type pt struct {
		ms int64
		v  float64
	}
	samples := map[int][]pt{}
	busGPU := map[string]int{}
	for g := 0; g < 4; g++ {
		busGPU[fmt.Sprintf("00000000:%02X:00.0", 0x18+g)] = g
	}
	for node, dir := range map[string]string{"gn1": "otel", "gn2": "otel/nodes/gn2"} {
		m, err := otlptest.Read(filepath.Join(d, "run", dir, "metrics.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		want := "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
		if node == "gn2" {
			want = "DCGM_FI_DEV_POWER_USAGE"
		}
		kept := map[int]bool{}
		for _, x := range m.Metrics {
			if !strings.HasPrefix(x.Name, "DCGM_FI_DEV_") {
				continue
			}
			var dps []otlptest.NumberPoint
			if x.Gauge != nil {
				dps = x.Gauge.DataPoints
			}
			if x.Sum != nil {
				dps = append(dps, x.Sum.DataPoints...)
			}
			for _, p := range dps {
				bus, _ := p.Attributes.Str("pci_bus_id")
				g := busGPU[bus]
				kept[g] = true
				if x.Name == want && p.Flags&1 == 0 {
					samples[g] = append(samples[g], pt{int64(p.Time) / 1e6, p.Value()})
				}
			}
		}
		// The node kept exactly its own GPUs, by device.
		if len(kept) != 2 || !kept[gpuOf[node][0]] || !kept[gpuOf[node][1]] {
			t.Errorf("%s kept the stand-in's GPUs %v, want %v (by device, not index order)", node, kept, gpuOf[node])
		}
		// The supervisor recorded each GRES index with its gres.conf
		// file's minor (gn2: 2 and 3, not 0 and 1).
		var st jobdir.State
		if b, err := os.ReadFile(filepath.Join(d, "run", dir, jobdir.StateFile)); err != nil {
			t.Error(err)
		} else if err := json.Unmarshal(b, &st); err != nil {
			t.Error(err)
		}
		var got []string
		for _, g := range st.GPUs {
			got = append(got, fmt.Sprintf("%s:%s:%d:%s", g.Slurm, g.By, g.Minor, g.PCIBusID))
		}
		var wantGPUs []string
		for i, g := range gpuOf[node] {
			wantGPUs = append(wantGPUs, fmt.Sprintf("%d:%s:%d:00000000:%02X:00.0", i, gpudev.ByGres, minorsOf[node][i], 0x18+g))
		}
		if fmt.Sprint(got) != fmt.Sprint(wantGPUs) {
			t.Errorf("%s state.json gpus %q, want %q (GRES index:how:minor:bus)", node, got, wantGPUs)
		}
	}
	nodeGPUs := map[string][]int{"gn1": {2, 3}, "gn2": {0, 1}}
	// truth is the curves' integral of a node's GPUs between the samples
	// that bracket [t0, t1] (as inspect picks them), and over the window
	// itself.
	truth := func(node string, t0, t1 time.Time) (bracketed, window float64) {
		for _, g := range nodeGPUs[node] {
			b0, b1 := int64(-1), int64(-1)
			for _, p := range samples[g] {
				if p.ms <= t0.UnixMilli() {
					b0 = p.ms
				}
				if p.ms >= t1.UnixMilli() && b1 < 0 {
					b1 = p.ms
				}
			}
			if b0 < 0 || b1 < 0 {
				t.Errorf("%s GPU %d: no samples bracket %v..%v", node, g, t0, t1)
				continue
			}
			bracketed += curves[g].joules(epoch, time.UnixMilli(b0), time.UnixMilli(b1))
			window += curves[g].joules(epoch, t0, t1)
		}
		return bracketed, window
	}
	within := func(got inspect.Value, want float64) bool {
		return got.Known() && math.Abs(float64(got)-want) <= 0.02*want
	}
	reasons := func(v inspect.Verdict) string { return strings.Join(v.Why, " | ") }

	// Per node and step.
	seen := map[string]bool{}
	for _, se := range rep.StepEnergy {
		t.Logf("%s step %s: %v J (error %v J, bracket %v s, max gap %v s) over %v s from %s, %v", se.Node, se.Step, se.Joules, se.ErrorJoules,
			se.BracketSeconds, se.MaxGapSeconds, se.WindowSeconds, se.Source, se.Verdict)
		if se.Step != "0" && se.Step != "1" {
			continue
		}
		seen[se.Node+" "+se.Step] = true
		if se.Start == nil || se.End == nil {
			t.Errorf("%s step %s: window not known", se.Node, se.Step)
			continue
		}
		br, win := truth(se.Node, *se.Start, *se.End)
		t.Logf("%s step %s: the curves give %.1f J between the bracketing samples, %.1f J over the window", se.Node, se.Step, br, win)
		if se.Step == "1" && se.Node == "gn1" {
			// GPU 2's counter restarted: the energy between its last
			// sample before the reset and the reset (at most the curve's
			// between that sample and the first after the drop, give or
			// take 50 ms at 400 W between a scrape's time and the
			// stand-in's reading) is not counted.
			lost, most := br-float64(se.Joules), 0.0
			for i := 1; i < len(samples[2]); i++ {
				if a, b := samples[2][i-1], samples[2][i]; b.v < a.v {
					most = curves[2].joules(epoch, time.UnixMilli(a.ms), time.UnixMilli(b.ms))
				}
			}
			t.Logf("gn1 step 1: %.1f J not counted across the reset (at most %.1f J)", lost, most)
			if !(lost > 0 && lost <= most*1.01+20) || se.Verdict.Trusted || !strings.Contains(reasons(se.Verdict), inspect.ReasonReset) {
				t.Errorf("gn1 step 1: %v J (curves %.1f J), %v: want up to %.1f J less than the curves and a counter reset", se.Joules, br, se.Verdict, most)
			}
			continue
		}
		if !within(se.Joules, br) {
			t.Errorf("%s step %s: %v J, want %.1f J within 2 %%", se.Node, se.Step, se.Joules, br)
		}
		wantSource := inspect.SourceEnergyCounter
		if se.Node == "gn2" {
			wantSource = inspect.SourcePower
		}
		if se.Source != wantSource || strings.Join(se.GPUs, ",") == "" {
			t.Errorf("%s step %s: source %q GPUs %v, want %q", se.Node, se.Step, se.Source, se.GPUs, wantSource)
		}
		if se.Node == "gn1" && !(win <= float64(se.Joules)*1.02 && win >= float64(se.Joules-se.ErrorJoules)*0.98) {
			t.Errorf("gn1 step %s: the window's %.1f J outside the counter's bound [%v - %v, %v] J", se.Step, win, se.Joules, se.ErrorJoules, se.Joules)
		}
		switch {
		case se.Step == "0" && !se.Verdict.Trusted:
			t.Errorf("%s step 0: %v, want trusted", se.Node, se.Verdict)
		case se.Step == "1" && (se.Verdict.Trusted || !strings.Contains(reasons(se.Verdict), inspect.ReasonGap) || !(se.MaxGapSeconds >= 5)):
			t.Errorf("gn2 step 1: %v, max gap %v s: want a gap above 3 s flagged", se.Verdict, se.MaxGapSeconds)
		}
	}
	for _, k := range []string{"gn1 0", "gn2 0", "gn1 1", "gn2 1"} {
		if !seen[k] {
			t.Errorf("no energy row for %s", k)
		}
	}

	// Per role: the role's node over the step's window on every node.
	roleNode := map[string]string{"policy": "gn1", "judge": "gn2"}
	tokens := map[string]float64{"0": 1208, "1": 892} // sum of 50+3n, n = 1..16 and 17..24
	seen = map[string]bool{}
	for _, re := range rep.RoleEnergy {
		t.Logf("role %s step %s: %v J, %v tokens, %v J per 1k tokens, %v", re.Role, re.Step, re.Joules, re.GenerationTokens, re.JoulesPer1kTokens, re.Verdict)
		node, ok := roleNode[re.Role]
		if !ok || (re.Step != "0" && re.Step != "1") {
			continue
		}
		seen[re.Role+" "+re.Step] = true
		if strings.Join(re.Nodes, ",") != node || re.Start == nil || re.End == nil {
			t.Errorf("role %s step %s: nodes %v window %v..%v, want %s", re.Role, re.Step, re.Nodes, re.Start, re.End, node)
			continue
		}
		if re.GenerationTokens != inspect.Value(tokens[re.Step]) {
			t.Errorf("role %s step %s: %v generation tokens, want %v", re.Role, re.Step, re.GenerationTokens, tokens[re.Step])
		}
		if !re.JoulesPer1kTokens.Known() || math.Abs(float64(re.JoulesPer1kTokens)-float64(re.Joules)*1000/tokens[re.Step]) > 1e-6*float64(re.JoulesPer1kTokens) {
			t.Errorf("role %s step %s: %v J per 1k tokens for %v J", re.Role, re.Step, re.JoulesPer1kTokens, re.Joules)
		}
		br, _ := truth(node, *re.Start, *re.End)
		t.Logf("role %s step %s: the curves give %.1f J, %.1f J per 1,000 tokens", re.Role, re.Step, br, br*1000/tokens[re.Step])
		switch {
		case re.Step == "0":
			if !within(re.Joules, br) || !re.Verdict.Trusted {
				t.Errorf("role %s step 0: %v J (curves %.1f J), %v: want within 2 %% and trusted", re.Role, re.Joules, br, re.Verdict)
			}
		case re.Role == "policy":
			if re.Verdict.Trusted || !strings.Contains(reasons(re.Verdict), inspect.ReasonReset) {
				t.Errorf("role policy step 1: %v, want the counter reset", re.Verdict)
			}
		default:
			if !within(re.Joules, br) || re.Verdict.Trusted || !strings.Contains(reasons(re.Verdict), inspect.ReasonGap) {
				t.Errorf("role judge step 1: %v J (curves %.1f J), %v: want within 2 %% and the gap flagged", re.Joules, br, re.Verdict)
			}
		}
	}
	for _, k := range []string{"policy 0", "judge 0", "policy 1", "judge 1"} {
		if !seen[k] {
			t.Errorf("no role energy row for %s", k)
		}
	}
	// The backend: each node's supervisor sent its step figures at the
	// drain (gym_otel.gpu.energy, under the run's identity), the same
	// joules and verdicts as inspect's.
	jobID := jobIDOf(t, r)
	want := map[string]string{}
	for _, se := range rep.StepEnergy {
		if se.Joules.Known() && (se.Step == "0" || se.Step == "1") {
			want[fmt.Sprintf("%s %.3f %v", se.Step, float64(se.Joules), se.Verdict.Trusted)] = se.Node
		}
	}
	var got []string
	harness.WaitFor(t, 30*time.Second, "the energy lines at the backend", func() bool {
		m, err := otlptest.ReadGrowing(filepath.Join(backendDir, "metrics.jsonl"))
		if err != nil {
			return false
		}
		got = got[:0]
		for _, x := range m.Metrics {
			if x.Name != vocab.GPUEnergy || x.Gauge == nil || x.Resource.Text()["slurm_job_id"] != jobID {
				continue
			}
			for _, p := range x.Gauge.DataPoints {
				a := p.Attributes.Text()
				if a[vocab.AttrStepID] == "0" || a[vocab.AttrStepID] == "1" {
					got = append(got, fmt.Sprintf("%s %.3f %s", a[vocab.AttrStepID], p.Value(), a[vocab.AttrEnergyTrusted]))
				}
			}
		}
		return len(got) >= len(want)
	})
	for _, g := range got {
		if _, ok := want[g]; !ok {
			t.Errorf("backend: gym_otel.gpu.energy %q is none of inspect's step figures %v", g, want)
		}
		delete(want, g)
	}
	if len(want) > 0 {
		t.Errorf("backend: no gym_otel.gpu.energy for %v (got %v)", want, got)
	}

	html, err := os.ReadFile(filepath.Join(art, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{inspect.ReasonReset, inspect.ReasonGap} {
		if !strings.Contains(text, w) {
			t.Errorf("inspect's text does not say %q", w)
		}
		if !strings.Contains(string(html), w) {
			t.Errorf("inspect's HTML report does not say %q", w)
		}
	}
	for _, w := range []string{"<h2>Energy per step</h2>", "<h2>Energy per role</h2>", `<td class="l">policy</td>`, `<td class="l">judge</td>`} {
		if !strings.Contains(string(html), w) {
			t.Errorf("inspect's HTML report has no %q", w)
		}
	}
	if t.Failed() {
		t.Logf("inspect:\n%s", text)
	}
}
