package plugin_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/inspect"
	"github.com/gym-otel-spank/gym-otel-spank/internal/slurmkit"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// The report of a real two-node job, every figure against the values the
// stand-ins were told to produce. On each node a vLLM stand-in counts only
// requests: 16 requests, a restart (its counters and histograms reset),
// 8 more. A dcgm stand-in with constant values and an idle GPU 3, and
// Debian's node_exporter, both on the first node's loopback, which the
// nodes share here, so both nodes' collectors scrape them. A Gym stand-in
// runs 8 rollouts of 1010 ms, rollouts 3 and 7 fail (verify result fail,
// span status Error, an ERROR log record). The collectors scrape every
// second (the test site).
//
// Each phase waits for what it needs, not for a time: after the requests
// of a server, two scrapes of it (its scrape log; the second began after
// the requests); after a server's kill, a failed scrape of it in the
// node's files (the test reads them and lets the script go on); the
// rollouts' durations sit well inside their buckets (1010 ms of sleeps
// each: above 1000, and 390 ms of slack below 1400).
//
// Expected, per node (the stand-ins' README says what the n-th request
// does): requests 16+8 = 24; prompt tokens sum(100+7n, n=1..16) +
// sum(100+7n, n=1..8) = 2552+1052 = 3604; generation tokens
// sum(50+3n) = 1208+508 = 1716; 3 observations each of the e2e
// latencies 0.31 0.42 0.75 0.9 1.2 1.7 2.2 4.0 s in buckets 0.3 0.5 0.8 1
// 1.5 2 2.5 5 10: cumulative 0 6 9 12 15 18 21 24 24, so histogram_quantile
// gives p50 = 0.8+0.2*(3/3) = 1.0, p90 (rank 21.6) = 2.5+2.5*(0.6/3) = 3.0,
// p99 (rank 23.76) = 2.5+2.5*(2.76/3) = 4.8; time to first token 3 each of
// 0.03 0.045 0.07 0.09 0.12 0.15 0.3 0.6 s in vLLM's buckets: cumulative
// 3 (<=0.04) 6 (0.06) 9 (0.08) 12 (0.1) 18 (0.25) 21 (0.5) 24 (0.75), so
// p50 = 0.08+0.02*(3/3) = 0.1, p90 = 0.5+0.25*(0.6/3) = 0.55, p99 =
// 0.5+0.25*(2.76/3) = 0.73. The Gym SDK's histogram (default bounds
// ... 1000 2500 ...) holds 8 rollouts in (1000, 2500]: one bucket, so the
// report gives the range its points' min and max say (about 1000-1400 ms),
// not the p50 1750 and p99 2485 interpolation would make up (above the
// largest rollout); verify 6 pass, 2 fail.
func TestInspectReport(t *testing.T) {
	waitIdle(t)
	for _, name := range []string{"vllm-standin", "dcgm-standin", "gym-standin"} {
		p := testenv.Standin(t, name)
		if out, err := run("install", "-m", "0755", p, filepath.Join(plugDir, name)); err != nil {
			t.Fatalf("install %s: %v %s", p, err, out)
		}
	}
	nodeExporter := testenv.Binary(t, "prometheus-node-exporter", "/usr/bin/prometheus-node-exporter")
	vllmBase, _ := strconv.Atoi(shifted(18161))
	dcgmPort, nodePort := shifted(18165), shifted(18166)
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	base := filepath.Join(jobsDir, "inspect-"+tag)
	cfg := fmt.Sprintf(`compute:
  gymtest:
    node_pools:
      n0: {nodes: 1}
      n1: {nodes: 1}
driver:
  gym_install: /opt/gym
job:
  output_path: %s.run
otel:
  gpu_metrics_port: %s
  node_metrics_port: %s
services:
  svc0:
    type: vllm
    port: %d
    served_model_name: tiny-model
    node_pool: n0
  svc1:
    type: vllm
    port: %d
    served_model_name: tiny-model
    node_pool: n1
`, base, dcgmPort, nodePort, vllmBase, vllmBase+1)
	if err := os.WriteFile(base+".gym.yaml", []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	script := writeScript(t, "inspect-"+tag+".sh", fmt.Sprintf(`
P=%[2]s
lines() { cat "$1" 2>/dev/null | wc -l; }
%[2]s/dcgm-standin --port %[4]s --gpus 0,1,2,3 --idle-gpus 3 --constant --scrape-log %[1]s.dcgm-scrapes &
dcgm=$!
%[5]s --web.listen-address=127.0.0.1:%[6]s --collector.disable-defaults --collector.cpu --collector.meminfo --collector.loadavg &
nodex=$!
srun -N2 --ntasks-per-node=1 --overlap bash -c '
  port=$((%[3]d + SLURM_NODEID))
  log=%[1]s.scrapes.$SLURMD_NODENAME
  health() { for i in $(seq 1 1200); do curl -sf http://127.0.0.1:$port/health >/dev/null && return; sleep 0.1; done; exit 4; }
  req() { for i in $(seq 1 $1); do curl -sf -XPOST http://127.0.0.1:$port/v1/completions >/dev/null || exit 3; done; }
  scraped() { n=$(cat $log 2>/dev/null | wc -l); for i in $(seq 1 1200); do [ $(cat $log 2>/dev/null | wc -l) -ge $((n + 2)) ] && return; sleep 0.1; done; exit 5; }
  %[2]s/vllm-standin --port $port --model tiny-model --count-on request --scrape-log $log & pid=$!
  health; req 16; scraped
  kill $pid; wait $pid
  touch %[1]s.down.$SLURMD_NODENAME
  for i in $(seq 1 1200); do [ -e %[1]s.downseen.$SLURMD_NODENAME ] && break; sleep 0.1; done
  [ -e %[1]s.downseen.$SLURMD_NODENAME ] || exit 6
  %[2]s/vllm-standin --port $port --model tiny-model --count-on request --scrape-log $log & pid=$!
  health; scraped; req 8; scraped
  curl -sf http://127.0.0.1:$port/metrics > %[1]s.final.$SLURMD_NODENAME
  kill $pid; wait $pid
' &
steps=$!
%[2]s/gym-standin --rollouts 8 --rollout-duration 1010ms --error-every 4 || exit 9
wait $steps || exit 8
# A few more scrapes of dcgm and node_exporter by the two collectors.
n=$(lines %[1]s.dcgm-scrapes)
for i in $(seq 1 1200); do [ $(lines %[1]s.dcgm-scrapes) -ge $((n + 4)) ] && break; sleep 0.1; done
kill $dcgm $nodex
wait
`, base, plugDir, vllmBase, dcgmPort, nodeExporter, nodePort))
	done := make(chan result, 1)
	go func() {
		done <- asUser(t, 5*time.Minute, tokenEnv(), fmt.Sprintf("sbatch -N2 --wait --gym-otel=config=%s.gym.yaml -o %s.out %s", base, base, script))
	}()
	// Once a node's script has killed its server, wait for a failed
	// scrape of it in that node's files, then let the script go on.
	r := letDownSeen(t, done, base, vllmBase)
	if r.code != 0 {
		out, _ := os.ReadFile(base + ".out")
		t.Fatalf("exit %d; stderr %s\n%s", r.code, r.stderr, out)
	}
	jobID := jobIDOf(t, r)
	waitNoCollector(t)

	cli := filepath.Join(root, "build", "gym-otel-spank")
	rep, text, art := slurmkit.Inspect(t, cli, base+".run")
	html := filepath.Join(art, "report.html")

	near := func(v inspect.Value, want float64) bool { return math.Abs(float64(v)-want) < 1e-6 }
	if strings.Join(rep.Job.Nodes, ",") != "gn1,gn2" || strings.Join(inspect.Texts(rep.Job.Identity["slurm_job_id"]), ",") != jobID {
		t.Errorf("nodes %v identity %v", rep.Job.Nodes, rep.Job.Identity)
	}

	// The model servers, one per node, and all of them.
	if len(rep.ModelServers) != 3 {
		t.Fatalf("model servers: %+v", rep.ModelServers)
	}
	for i, m := range rep.ModelServers {
		n := 1.0
		if i == 2 {
			n = 2
		}
		want := fmt.Sprintf("gn%d gym-vllm/svc%d tiny-model", i+1, i)
		if i == 2 {
			want = "(all)  "
		}
		if got := m.Node + " " + m.Producer + " " + m.Model; got != want {
			t.Errorf("server %d is %q, want %q", i, got, want)
		}
		if m.Requests != inspect.Value(24*n) || m.PromptTokens != inspect.Value(3604*n) || m.GenerationTokens != inspect.Value(1716*n) || m.CounterResets != 1 {
			t.Errorf("%s: requests %v prompt %v generation %v resets %d, want %v %v %v 1", want, m.Requests, m.PromptTokens, m.GenerationTokens,
				m.CounterResets, 24*n, 3604*n, 1716*n)
		}
		e, f := m.E2ELatency, m.TTFT
		if e.Count != inspect.Value(24*n) || !near(e.P50, 1.0) || !near(e.P90, 3.0) || !near(e.P99, 4.8) {
			t.Errorf("%s: e2e latency %+v, want n %v p50 1.0 p90 3.0 p99 4.8", want, e, 24*n)
		}
		if !near(e.Mean, (0.31+0.42+0.75+0.9+1.2+1.7+2.2+4.0)/8) {
			t.Errorf("%s: e2e mean %v", want, e.Mean)
		}
		if f.Count != inspect.Value(24*n) || !near(f.P50, 0.1) || !near(f.P90, 0.55) || !near(f.P99, 0.73) {
			t.Errorf("%s: time to first token %+v, want n %v p50 0.1 p90 0.55 p99 0.73", want, f, 24*n)
		}
		if i == 2 {
			continue
		}
		if !(m.PromptTokensPerSecond > 0) || len(m.GenerationPerSec) == 0 {
			t.Errorf("%s: no token rate: %v %d points", want, m.PromptTokensPerSecond, len(m.GenerationPerSec))
		}
		// Gauges: running n%%4+1 <= 4, waiting n%%3 <= 2, KV (n%%5)/10 <= 0.4;
		// after the 8th request of the second server: waiting 2, KV 0.3.
		if !(m.RunningMax >= 1 && m.RunningMax <= 4) || !(m.WaitingMax <= 2) || !(m.KVCacheMax <= 0.4) {
			t.Errorf("%s: gauges running %v waiting %v kv %v", want, m.RunningMax, m.WaitingMax, m.KVCacheMax)
		}
		if w, k := m.WaitingOverTime, m.KVCacheOverTime; len(w) == 0 || len(k) == 0 || w[len(w)-1][1] != 2 || math.Abs(k[len(k)-1][1]-0.3) > 1e-9 {
			t.Errorf("%s: last waiting / KV-cache points %v %v, want 2 and 0.3", want, w, k)
		}
		var buckets []string
		for _, c := range m.E2EBuckets.Counts {
			buckets = append(buckets, strconv.FormatFloat(c, 'g', -1, 64))
		}
		if strings.Join(buckets, " ") != "0 6 3 3 3 3 3 3 0 0" {
			t.Errorf("%s: e2e buckets %v", want, buckets)
		}
	}

	// GPUs: both nodes scrape the one dcgm stand-in: GPU g at
	// (13+29g)%%101 %%, 20000+(97+331g) MiB, 120.5+(7+11g) W; GPU 3 idle.
	if len(rep.GPUs) != 8 {
		t.Fatalf("gpus: %+v", rep.GPUs)
	}
	for i, g := range rep.GPUs {
		node, gpu := fmt.Sprintf("gn%d", i/4+1), i%4
		util, mem, power, idle := float64((13+29*gpu)%101), float64(20000+97+331*gpu), 120.5+float64(7+11*gpu), false
		if gpu == 3 {
			util, mem, power, idle = 0, 0, 61.5, true
		}
		if g.Node != node || g.GPU != strconv.Itoa(gpu) || g.UtilMean != inspect.Value(util) || g.UtilMax != inspect.Value(util) ||
			g.MemoryUsedMax != inspect.Value(mem) || !near(g.PowerMean, power) || g.Idle != idle || g.Model != "NVIDIA H100 80GB HBM3" || len(g.UtilOverTime) < 3 {
			t.Errorf("gpu %d: %+v, want %s/%d util %v mem %v power %v idle %v", i, g, node, gpu, util, mem, power, idle)
		}
		// The test's Slurm has no GPU gres: the prolog saw neither
		// SLURM_JOB_GPUS nor CUDA_VISIBLE_DEVICES, so every GPU is kept
		// and marked unnamed, and no energy is attributed to the job.
		if g.Attribution != "unnamed" {
			t.Errorf("gpu %d: gpu_attribution %q, want unnamed", i, g.Attribution)
		}
	}
	if e := rep.Energy; e.Joules.Known() || e.Why != inspect.WhyNotAttributable || len(rep.GPUSharing) != 8 {
		t.Errorf("energy %+v, sharing %q: want no figure on GPUs Slurm did not name", e, rep.GPUSharing)
	}
	// Energy per step: the batch script on gn1 and step 0 on both nodes,
	// each over its own window, none attributed (the GPUs unnamed); per
	// role (svc0 on gn1, svc1 on gn2) the servers' generation tokens.
	var steps []string
	for _, se := range rep.StepEnergy {
		steps = append(steps, se.Node+" "+se.Step)
		if se.Joules.Known() || se.Verdict.Trusted || len(se.Verdict.Why) != 1 || !strings.HasPrefix(se.Verdict.Why[0], inspect.ReasonNotAttributable) ||
			!(se.WindowSeconds > 0) || len(se.GPUs) != 4 {
			t.Errorf("energy of %s step %s: %+v", se.Node, se.Step, se)
		}
	}
	if strings.Join(steps, ",") != "gn1 batch,gn1 0,gn2 0" {
		t.Errorf("energy per step: %q", steps)
	}
	for _, re := range rep.RoleEnergy {
		if re.Joules.Known() || re.Verdict.Trusted || !(re.GenerationTokens > 0) || len(re.Nodes) != 1 {
			t.Errorf("energy of role %s step %s: %+v", re.Role, re.Step, re)
		}
	}

	// Hosts: node_exporter's view of this host, from both nodes.
	memTotal := procMemTotal(t)
	if len(rep.Hosts) != 2 {
		t.Fatalf("hosts: %+v", rep.Hosts)
	}
	for i, h := range rep.Hosts {
		if h.Node != fmt.Sprintf("gn%d", i+1) || h.CPUs != runtime.NumCPU() || h.MemoryTotal != inspect.Value(memTotal) ||
			!(h.CPUBusy > 0 && h.CPUBusy <= 1) || !(h.MemoryUsedMax > 0 && h.MemoryUsedMax < h.MemoryTotal) {
			t.Errorf("host %d: %+v, want %d CPUs, memory %v", i, h, runtime.NumCPU(), memTotal)
		}
	}

	// Gym.
	g := rep.Gym
	if g.RolloutSpans.Count != 8 || !(g.RolloutSpans.P50 >= 1000 && g.RolloutSpans.P50 < 1400) || !(g.RolloutSpans.Max < 1400) {
		t.Errorf("rollout spans %+v", g.RolloutSpans)
	}
	if h := g.RolloutHistogram; h.Count != 8 || len(h.Within) != 2 || !(h.Within[0] >= 1000 && h.Within[1] < 1400 && h.Within[0] <= h.Within[1]) ||
		h.P50.Known() || h.P99.Known() || h.Max != h.Within[1] || h.Min != h.Within[0] {
		t.Errorf("rollout histogram %+v, want n 8 within its min and max (1000..1400), no quantiles", h)
	}
	if !(g.RolloutsWindowSeconds > 0) || g.RolloutsCounted != 8 {
		t.Errorf("rollouts %v in %v s", g.RolloutsCounted, g.RolloutsWindowSeconds)
	}
	if g.Verify["pass"] != 6 || g.Verify["fail"] != 2 || g.VerifySpans["pass"] != 6 || g.VerifySpans["fail"] != 2 || !near(g.VerifySuccess, 0.75) {
		t.Errorf("verify %v spans %v success %v", g.Verify, g.VerifySpans, g.VerifySuccess)
	}
	// A verify span is one of a rollout's three sleeps of 336.7 ms.
	if v := g.VerifyLatency; v.Count != 8 || !(v.P50 >= 336 && v.P50 < 1010) {
		t.Errorf("verify latency %+v", v)
	}
	// 8 rollouts one after the other, 1010 ms of sleeps each: at most 60
	// a minute; all within the job (sbatch --wait's time): at least 8 in
	// that time.
	if most, least := 60.0, 8/r.took.Minutes(); !(float64(g.RolloutsPerMinute) <= most && float64(g.RolloutsPerMinute) >= least) || len(g.RolloutRate["gn1"]) == 0 {
		t.Errorf("rollouts per minute %v, want between %.2f and %.2f (8 rollouts of 1010 ms in a job of %v), rate %v", g.RolloutsPerMinute, least, most, r.took, g.RolloutRate)
	}

	// Errors: rollouts 3 and 7, as spans and as log records with the
	// same trace ids.
	var spanTraces, logTraces []string
	for _, e := range rep.Errors.SpanExamples {
		spanTraces = append(spanTraces, e.TraceID)
		if e.Name != "gym.rollout" || !strings.HasSuffix(e.Message, " failed") || e.Node != "gn1" {
			t.Errorf("error span %+v", e)
		}
	}
	for _, e := range rep.Errors.LogExamples {
		logTraces = append(logTraces, e.TraceID)
	}
	sort.Strings(spanTraces)
	sort.Strings(logTraces)
	if rep.Errors.Spans != 2 || rep.Errors.Logs != 2 || len(spanTraces) != 2 || strings.Join(spanTraces, ",") != strings.Join(logTraces, ",") ||
		rep.Errors.LogsBySeverity["INFO"] != 8 || rep.Errors.LogsBySeverity["ERROR"] != 2 {
		t.Errorf("errors %+v", rep.Errors)
	}

	// Spans: raw and from the span_metrics connector, whose durations are
	// taken from the raw spans (its buckets ... 200 400 ... ms would put
	// the p99 of 8 rollouts of about 300 ms at 398).
	// The stand-in's process span (gym.run, a child of the step's span
	// in TRACEPARENT) wraps its rollouts: it may come first.
	rollouts := -1
	for i, s := range rep.Spans.ByName {
		if s.Name == "gym.rollout" {
			rollouts = i
		}
	}
	if rollouts < 0 || rep.Spans.ByName[rollouts].Duration.Count != 8 || len(rep.Spans.Slowest) == 0 ||
		(rep.Spans.Slowest[0].Name != "gym.rollout" && rep.Spans.Slowest[0].Name != "gym.run") {
		t.Errorf("spans %+v", rep.Spans.ByName)
	}
	found := false
	for _, m := range rep.Spans.SpanMetrics {
		if m.Name == "gym.rollout" {
			found = true
			if m.Calls != 8 || m.Duration.Count != 8 || m.DurationFrom != "spans" || m.Spans != 8 || m.Duration.P99 != g.RolloutSpans.P99 {
				t.Errorf("span metrics of gym.rollout: %+v, want 8 calls, durations from the 8 raw spans (p99 %v)", m, g.RolloutSpans.P99)
			}
		}
	}
	if !found {
		t.Errorf("no span metrics of gym.rollout: %+v", rep.Spans.SpanMetrics)
	}

	// Health: every line parsed; each node's vLLM target failed while its
	// server restarted; receipts of both nodes, nothing lost.
	if rep.Health.BadLines != 0 {
		t.Errorf("%d lines did not parse: %+v", rep.Health.BadLines, rep.Health.Dirs)
	}
	failed := map[string]bool{}
	for _, ft := range rep.Health.FailedTargets {
		failed[ft.Job+" "+ft.Instance] = ft.Answered > 0
	}
	for i := 0; i < 2; i++ {
		k := fmt.Sprintf("gym-vllm/svc%d gn%d:%d", i, i+1, vllmBase+i)
		if ok, in := failed[k]; !in || !ok {
			t.Errorf("failed targets %+v: want %s with failed and answered scrapes", rep.Health.FailedTargets, k)
		}
	}
	if len(rep.Receipts) != 2 || rep.Receipts[0].Receipt == nil || rep.Receipts[1].Receipt == nil || len(rep.Trouble) != 0 {
		t.Errorf("receipts %+v trouble %v", rep.Receipts, rep.Trouble)
	}

	// The terminal report: 100 columns, both nodes named.
	for i, l := range strings.Split(string(text), "\n") {
		if len([]rune(l)) > inspect.Width {
			t.Errorf("text line %d has %d columns: %q", i+1, len([]rune(l)), l)
		}
	}
	for _, want := range []string{"gn1 gym-vllm/svc0 model tiny-model", "gn2 gym-vllm/svc1 model tiny-model", "idle the whole run: gn1/3, gn2/3"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("text lacks %q", want)
		}
	}

	// The outcome: the job completed with exit code 0 (as sacct says, or
	// derived from the batch step where the cluster keeps no accounting),
	// on gn[1-2], elapsed within a second of slurmctld's StartTime to
	// EndTime (whole seconds), the 8 rollouts; the text's first lines say
	// it.
	o := rep.Outcome
	st, en := scontrolTimes(t, jobID)
	if o.State != "COMPLETED" || (o.StateFrom != "sacct" && o.StateFrom != "derived") || o.ExitCode == nil || *o.ExitCode != 0 ||
		o.Hostlist != "gn[1-2]" || o.Nodes != 2 || o.Rollouts != 8 || !o.ElapsedSeconds.Known() ||
		math.Abs(float64(o.ElapsedSeconds)-en.Sub(st).Seconds()) > 1.5 {
		t.Errorf("outcome %+v: want COMPLETED, exit 0, on gn[1-2], 8 rollouts, elapsed about %v", o, en.Sub(st))
	}
	t.Logf("outcome: %s from %s (%s; sacct %s), elapsed %v s; slurmctld %v", o.State, o.StateFrom, o.StateWhy, o.Sacct, o.ElapsedSeconds, en.Sub(st))
	if head := strings.Join(strings.SplitN(string(text), "\n", 8), "\n"); !strings.Contains(head, "== outcome: job "+jobID+" COMPLETED, exit code 0") ||
		!strings.Contains(head, "2 gn[1-2]") {
		t.Errorf("the text does not open on the outcome:\n%s", head)
	}

	// The job's Slurm phases, one entry per node, the first node's queue
	// wait ending at slurmctld's StartTime; where the time went from the
	// submit to the first rollout, in parts that add up to it; the
	// collector's own cgroup on each node (no cgroup plugin here: Slurm's
	// job group is said not to be kept).
	start, _ := scontrolTimes(t, jobID)
	if len(rep.Phases) != 2 {
		t.Fatalf("phases of %d nodes, want 2: %+v", len(rep.Phases), rep.Phases)
	}
	fr := rep.FirstRollout
	sum := 0.0
	for _, p := range fr.Parts {
		sum += float64(p.Seconds)
	}
	if fr.Start == nil || !fr.Start.Equal(start) || fr.Node != rep.Phases[0].Node || fr.TotalFrom != "submit" ||
		!fr.TotalSeconds.Known() || math.Abs(sum-float64(fr.TotalSeconds)) > 1e-6 || fr.FirstRollout == nil || fr.FirstRollout.Before(*fr.BatchStart) {
		t.Errorf("submit to first rollout %+v (parts sum %v s), StartTime %v", fr, sum, start)
	}
	for _, np := range rep.Phases {
		var coll, job bool
		for _, u := range rep.Cgroups {
			coll = coll || (u.Node == np.Node && u.Group == "collector" && u.CPUSeconds.Known())
			job = job || (u.Node == np.Node && u.Group == "job" && u.NotKept["all"] != "")
		}
		if !coll || !job {
			t.Errorf("%s: the collector's cgroup read %v, Slurm's job group said not kept %v: %+v", np.Node, coll, job, rep.Cgroups)
		}
	}
	for _, want := range []string{"== Slurm phases (s since the submit, ", "== submit to first rollout (batch node " + fr.Node + ")",
		"== cgroups (producer cgroup"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("text lacks %q", want)
		}
	}

	// How the run went, the page's first lines: 8 rollouts, 6 of 8
	// verified passed, 2 error spans and log records, the backend got
	// everything (acknowledged every item of the files: the default
	// delivery from them).
	if sm := rep.Summary; sm.Rollouts != 8 || !near(sm.PassRate, 0.75) || sm.ErrorSpans != 2 || sm.ErrorLogs != 2 || !sm.DeliveryOK ||
		!strings.HasPrefix(sm.Delivery, "nothing lost: the backend acknowledged all ") || !strings.Contains(sm.Delivery, "delivered from them by the supervisor") || sm.Throughput == "" {
		t.Errorf("summary %+v", sm)
	}
	page, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	if i, j := strings.Index(string(page), `id="delivery"`), strings.Index(string(page), `id="charts"`); i < 0 || j < i {
		t.Errorf("the page does not open on the summary (%d, %d)", i, j)
	}

	// The HTML report in headless Chromium.
	testenv.CheckPage(t, html, filepath.Join(art, "report.png"), "chart-throughput", "chart-queue", "chart-kvcache", "chart-gpu",
		"chart-load", "chart-rollouts", "chart-e2e-0", "chart-e2e-1", "chart-ttft-0", "chart-ttft-1", "chart-phases")
	waitIdle(t)
}

// letDownSeen waits for the job of TestInspectReport (its sbatch --wait's
// result on done): whenever the script on a node says its vLLM server is
// down (base.down.<node>), it waits for a failed scrape of that server
// after its answers in the node's files and then lets the script go on
// (base.downseen.<node>). It returns the sbatch's result.
func letDownSeen(t *testing.T, done <-chan result, base string, vllmBase int) result {
	t.Helper()
	dirs := []string{filepath.Join(base+".run", "otel"), filepath.Join(base+".run", "otel", "nodes", "gn2")}
	for {
		select {
		case r := <-done:
			return r
		case <-time.After(200 * time.Millisecond):
		}
		for i, dir := range dirs {
			node := fmt.Sprintf("gn%d", i+1)
			if _, err := os.Stat(base + ".down." + node); err != nil {
				continue
			}
			if _, err := os.Stat(base + ".downseen." + node); err == nil {
				continue
			}
			ts, err := inspect.Targets(dir) // an error: a line being written
			for _, x := range ts {
				if err == nil && x.Job == fmt.Sprintf("gym-vllm/svc%d", i) && x.Answered > 0 && x.Ended > 0 {
					t.Logf("%s: %s", node, inspect.ScrapeSummary(x.Scrapes, x.Answered, x.WarmingUp, x.Ended))
					if err := os.WriteFile(base+".downseen."+node, nil, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
}

// procMemTotal is this host's MemTotal in bytes, as node_exporter reports it.
func procMemTotal(t *testing.T) float64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb * 1024
		}
	}
	t.Fatal("no MemTotal in /proc/meminfo")
	return 0
}

// A collector killed mid-job and restarted by its supervisor: the report
// counts the vLLM stand-in's requests exactly once (the server kept
// running, so its counters did not reset: the new collector's first points
// continue the series), and says the collector restarted. 10 requests
// before the kill, 5 after: 15 requests, prompt tokens sum(100+7n,
// n=1..15) = 2340, generation tokens sum(50+3n) = 1110.
func TestInspectCollectorRestart(t *testing.T) {
	waitIdle(t)
	p := testenv.Standin(t, "vllm-standin")
	if out, err := run("install", "-m", "0755", p, filepath.Join(plugDir, "vllm-standin")); err != nil {
		t.Fatalf("install %s: %v %s", p, err, out)
	}
	port := shifted(18167)
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	base := filepath.Join(jobsDir, "restart-"+tag)
	cfg := fmt.Sprintf("compute:\n  gymtest: {}\ndriver:\n  gym_install: /opt/gym\njob:\n  output_path: %s.run\n"+
		"services:\n  policy:\n    type: vllm\n    port: %s\n    served_model_name: tiny-model\n", base, port)
	if err := os.WriteFile(base+".gym.yaml", []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// Each phase waits for two scrapes of the server (its scrape log; the
	// second began after the phase's requests), not for a time.
	script := writeScript(t, "restart-"+tag+".sh", fmt.Sprintf(`
log=%[1]s.scrapes
scraped() { n=$(cat $log 2>/dev/null | wc -l); for i in $(seq 1 1200); do [ $(cat $log 2>/dev/null | wc -l) -ge $((n + 2)) ] && return; sleep 0.1; done; exit 4; }
%[2]s/vllm-standin --port %[3]s --model tiny-model --count-on request --scrape-log $log &
v=$!
for i in $(seq 1 1200); do curl -sf http://127.0.0.1:%[3]s/health >/dev/null && break; sleep 0.1; done
for i in $(seq 1 10); do curl -sf -XPOST http://127.0.0.1:%[3]s/v1/completions >/dev/null || exit 3; done
scraped
touch %[1]s.kill
for i in $(seq 1 1800); do [ -e %[1]s.restarted ] && break; sleep 0.1; done
[ -e %[1]s.restarted ] || exit 5
scraped
for i in $(seq 1 5); do curl -sf -XPOST http://127.0.0.1:%[3]s/v1/completions >/dev/null || exit 3; done
scraped
kill $v
wait
`, base, plugDir, port))
	done := make(chan result, 1)
	go func() {
		done <- asUser(t, 5*time.Minute, tokenEnv(), fmt.Sprintf("sbatch -N1 --wait --gym-otel=config=%s.gym.yaml -o %s.out %s", base, base, script))
	}()
	// Kill the job's collector (the pid in its state.json, checked to be
	// the collector) once the script says so; wait for the supervisor to
	// record the restart.
	state := filepath.Join(base+".run", "otel", "state.json")
	waitFile(t, 60*time.Second, base+".kill")
	var st struct {
		CollectorPID int `json:"collector_pid"`
		Restarts     int `json:"restarts"`
	}
	b, err := os.ReadFile(state)
	if err != nil || json.Unmarshal(b, &st) != nil || st.CollectorPID == 0 {
		t.Fatalf("state.json %s: %v %s", state, err, b)
	}
	if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", st.CollectorPID)); !strings.Contains(exe, "otelcol") {
		t.Fatalf("pid %d of state.json is %q, not the collector", st.CollectorPID, exe)
	}
	if err := syscall.Kill(st.CollectorPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := st.CollectorPID
	deadline := time.Now().Add(patience)
	for {
		b, _ = os.ReadFile(state)
		if json.Unmarshal(b, &st) == nil && st.Restarts >= 1 && st.CollectorPID != killed && st.CollectorPID != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no restart recorded in state.json: %s", b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	os.WriteFile(base+".restarted", nil, 0o644)
	r := <-done
	if r.code != 0 {
		out, _ := os.ReadFile(base + ".out")
		t.Fatalf("exit %d; stderr %s\n%s", r.code, r.stderr, out)
	}
	waitNoCollector(t)

	cli := filepath.Join(root, "build", "gym-otel-spank")
	out, err := exec.Command(cli, "inspect", "--json", base+".run").Output()
	if err != nil {
		t.Fatalf("inspect --json: %v", err)
	}
	var rep inspect.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	text, _ := exec.Command(cli, "inspect", base+".run").CombinedOutput()
	t.Logf("inspect:\n%s", text)
	if len(rep.ModelServers) != 1 {
		t.Fatalf("model servers %+v", rep.ModelServers)
	}
	m := rep.ModelServers[0]
	if m.Requests != 15 || m.PromptTokens != 2340 || m.GenerationTokens != 1110 || m.CounterResets != 0 || m.E2ELatency.Count != 15 {
		t.Errorf("after a collector restart: requests %v prompt %v generation %v resets %d e2e n %v, want 15 2340 1110 0 15",
			m.Requests, m.PromptTokens, m.GenerationTokens, m.CounterResets, m.E2ELatency.Count)
	}
	if d := rep.Health.Dirs[0]; d.State == nil || d.State.Restarts != 1 {
		t.Errorf("health: %+v", d.State)
	}
	if !strings.Contains(string(text), "1 restarts") {
		t.Errorf("the text does not say the collector restarted")
	}
	waitIdle(t)
}
