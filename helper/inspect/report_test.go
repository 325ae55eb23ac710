package inspect

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// The lines below are shaped as the collector's file exporter writes them
// (see testdata/otel for lines the real collector wrote).

func res(node, producer, instance string) string {
	return fmt.Sprintf(`{"attributes":[{"key":"host.name","value":{"stringValue":%q}},{"key":"service.name","value":{"stringValue":"svc"}},`+
		`{"key":"service.name.override","value":{"stringValue":%q}},{"key":"service.instance.id","value":{"stringValue":%q}},`+
		`{"key":"slurm_job_id","value":{"stringValue":"42"}},{"key":"slurm_job_restart_count","value":{"intValue":"0"}}]}`, node, producer, instance)
}

const vl = `{"key":"engine","value":{"stringValue":"0"}},{"key":"model_name","value":{"stringValue":"m"}}`

// vllmScrape is one scrape of a vLLM server: prompt tokens p, the e2e
// histogram's counts per bucket (OTLP bucketCounts, not cumulative) over
// bounds 0.5, 1, 2.
func vllmScrape(node string, sec int, p float64, e2e [4]int, running, kv float64) string {
	n := e2e[0] + e2e[1] + e2e[2] + e2e[3]
	return fmt.Sprintf(`{"resourceMetrics":[{"resource":%s,"scopeMetrics":[{"metrics":[`+
		`{"name":"vllm_prompt_tokens_total","sum":{"dataPoints":[{"attributes":[%s],"timeUnixNano":"%d","asDouble":%v}],"aggregationTemporality":2,"isMonotonic":true}},`+
		`{"name":"vllm_num_requests_running","gauge":{"dataPoints":[{"attributes":[%s],"timeUnixNano":"%d","asDouble":%v}]}},`+
		`{"name":"vllm_kv_cache_usage_perc","gauge":{"dataPoints":[{"attributes":[%s],"timeUnixNano":"%d","asDouble":%v}]}},`+
		`{"name":"vllm_e2e_request_latency_seconds","histogram":{"dataPoints":[{"attributes":[%s],"timeUnixNano":"%d","count":"%d","sum":%d,`+
		`"bucketCounts":["%d","%d","%d","%d"],"explicitBounds":[0.5,1,2]}],"aggregationTemporality":2}},`+
		`{"name":"up","gauge":{"dataPoints":[{"timeUnixNano":"%d","asDouble":1}]}}]}]}]}`+"\n",
		res(node, "gym-vllm/policy", node+":8000"), vl, ns(sec), p, vl, ns(sec), running, vl, ns(sec), kv,
		vl, ns(sec), n, n, e2e[0], e2e[1], e2e[2], e2e[3], ns(sec))
}

func ns(sec int) int64 { return int64(1795949100+sec) * 1e9 }

func dcgmScrape(node string, sec int, utils ...float64) string {
	var ms []string
	for g, u := range utils {
		ms = append(ms, fmt.Sprintf(`{"name":"DCGM_FI_DEV_GPU_UTIL","gauge":{"dataPoints":[{"attributes":[{"key":"gpu","value":{"stringValue":"%d"}},`+
			`{"key":"modelName","value":{"stringValue":"H100"}}],"timeUnixNano":"%d","asDouble":%v}]}}`, g, ns(sec), u))
	}
	return fmt.Sprintf(`{"resourceMetrics":[{"resource":%s,"scopeMetrics":[{"metrics":[%s]}]}]}`+"\n", res(node, "dcgm", node+":9400"), strings.Join(ms, ","))
}

func spanLine(node string, spans ...string) string {
	return fmt.Sprintf(`{"resourceSpans":[{"resource":%s,"scopeSpans":[{"spans":[%s]}]}]}`+"\n", res(node, "nemo-gym/agent", ""), strings.Join(spans, ","))
}

func sp(name, trace string, startSec int, ms int, errMsg string, attrs string) string {
	st := "{}"
	if errMsg != "" {
		st = fmt.Sprintf(`{"code":2,"message":%q}`, errMsg)
	}
	return fmt.Sprintf(`{"traceId":%q,"spanId":"00000000000000aa","name":%q,"kind":1,"startTimeUnixNano":"%d","endTimeUnixNano":"%d","attributes":[%s],"status":%s}`,
		trace, name, ns(startSec), ns(startSec)+int64(ms)*1e6, attrs, st)
}

// writeJob writes a two-node job: on each node a vLLM server whose counter
// resets once on gn2, a dcgm-exporter with an idle GPU; rollout and verify
// spans, an error span and an error log on gn1, and a partial last line.
func writeJob(t *testing.T) string {
	t.Helper()
	job := t.TempDir()
	first := filepath.Join(job, "otel")
	second := filepath.Join(first, "nodes", "gn2")
	if err := os.MkdirAll(second, 0o755); err != nil {
		t.Fatal(err)
	}
	var m1, m2 strings.Builder
	// gn1: 100, 200, 300 prompt tokens; 4 requests: 1 <= 0.5, 2 in (0.5,1], 1 in (1,2].
	m1.WriteString(vllmScrape("gn1", 0, 100, [4]int{1, 0, 0, 0}, 1, 0.1))
	m1.WriteString(vllmScrape("gn1", 10, 200, [4]int{1, 1, 0, 0}, 3, 0.5))
	m1.WriteString(vllmScrape("gn1", 20, 300, [4]int{1, 2, 1, 0}, 2, 0.3))
	m1.WriteString(dcgmScrape("gn1", 0, 50, 0))
	m1.WriteString(dcgmScrape("gn1", 10, 70, 0))
	// gn2: 50, 150, reset, 40: 190 tokens; the histogram resets too.
	m2.WriteString(vllmScrape("gn2", 0, 50, [4]int{0, 1, 0, 0}, 1, 0.2))
	m2.WriteString(vllmScrape("gn2", 10, 150, [4]int{0, 2, 0, 0}, 1, 0.2))
	m2.WriteString(vllmScrape("gn2", 20, 40, [4]int{1, 0, 0, 0}, 1, 0.2))
	m2.WriteString(dcgmScrape("gn2", 0, 10, 20))
	m2.WriteString(`{"resourceMetrics":[{"resou`) // a partial line
	traces := spanLine("gn1",
		sp("gym.rollout", "t1", 1, 300, "", ""),
		sp("gym.rollout", "t2", 2, 500, "rollout 1 failed", ""),
		sp("gym.verify", "t1", 1, 40, "", `{"key":"nemo.gym.verify.result","value":{"stringValue":"pass"}}`),
		sp("gym.verify", "t2", 2, 60, "", `{"key":"nemo.gym.verify.result","value":{"stringValue":"fail"}}`))
	logs := fmt.Sprintf(`{"resourceLogs":[{"resource":%s,"scopeLogs":[{"logRecords":[`+
		`{"timeUnixNano":"%d","severityNumber":9,"severityText":"INFO","body":{"stringValue":"ok"}},`+
		`{"timeUnixNano":"%d","severityNumber":17,"severityText":"ERROR","body":{"stringValue":"rollout 1 failed"},"traceId":"t2","spanId":"00000000000000aa"}]}]}]}`+"\n",
		res("gn1", "nemo-gym/agent", ""), ns(1), ns(2))
	// The first node's collector.yaml: helper/render's golden, whose
	// targets are gym-vllm/policy (gn1:8000), node (gn1:9100), dcgm (gn1:9400).
	cfg, err := os.ReadFile("../render/testdata/two-services.golden.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for path, data := range map[string]string{
		filepath.Join(first, "collector.yaml"): string(cfg),
		filepath.Join(first, "metrics.jsonl"):  m1.String(),
		filepath.Join(first, "traces.jsonl"):   traces,
		filepath.Join(first, "logs.jsonl"):     logs,
		filepath.Join(second, "metrics.jsonl"): m2.String(),
	} {
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return job
}

func near(a Value, b float64) bool { return math.Abs(float64(a)-b) < 1e-9 }

// TestBuild: every figure of a two-node job, from lines with known values.
func TestBuild(t *testing.T) {
	r, err := Build(writeJob(t))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(r.Job.Nodes, ",") != "gn1,gn2" || r.Job.DurationSeconds != 20 {
		t.Errorf("nodes %v duration %v", r.Job.Nodes, r.Job.DurationSeconds)
	}
	if len(r.ModelServers) != 3 {
		t.Fatalf("model servers %+v", r.ModelServers)
	}
	g1, g2, all := r.ModelServers[0], r.ModelServers[1], r.ModelServers[2]
	if g1.Node != "gn1" || g1.Model != "m" || g1.PromptTokens != 300 || !near(g1.PromptTokensPerSecond, 10) || g1.CounterResets != 0 {
		t.Errorf("gn1: %+v", g1)
	}
	// 150 before the reset + 40; rate (190-50)/20 s.
	if g2.Node != "gn2" || g2.PromptTokens != 190 || !near(g2.PromptTokensPerSecond, 7) || g2.CounterResets != 1 {
		t.Errorf("gn2: %+v", g2)
	}
	// gn1: buckets 1, 2, 1 -> p50 rank 2: 0.5 + 0.5*(1/2) = 0.75.
	if g1.E2ELatency.Count != 4 || !near(g1.E2ELatency.P50, 0.75) || !near(g1.E2ELatency.P99, 1+1*(0.96/1)) {
		t.Errorf("gn1 e2e %+v", g1.E2ELatency)
	}
	// gn2: 2 in (0.5,1] then after the reset 1 <= 0.5: cumulative 1, 3, 3.
	if g2.E2ELatency.Count != 3 || strings.Trim(fmt.Sprint(g2.E2EBuckets.Counts), "[]") != "1 2 0 0" {
		t.Errorf("gn2 e2e %+v %+v", g2.E2ELatency, g2.E2EBuckets)
	}
	// All (sum by le): cumulative 2, 6, 7 -> p50 rank 3.5: 0.5 + 0.5*(1.5/4);
	// p90 rank 6.3: 1 + 1*(0.3/1).
	if all.Node != "(all)" || all.PromptTokens != 490 || all.E2ELatency.Count != 7 || !near(all.E2ELatency.P50, 0.6875) || !near(all.E2ELatency.P90, 1.3) {
		t.Errorf("all: %+v", all)
	}
	if g1.RunningMax != 3 || !near(g1.RunningMean, 2) || !near(g1.KVCacheMax, 0.5) || len(g1.GenerationPerSec) != 0 || len(g1.RunningOverTime) != 3 {
		t.Errorf("gn1 gauges: %+v", g1)
	}
	if len(r.GPUs) != 4 || r.GPUs[0].Node != "gn1" || r.GPUs[0].UtilMean != 60 || r.GPUs[0].UtilMax != 70 || r.GPUs[0].Idle ||
		!r.GPUs[1].Idle || r.GPUs[2].Node != "gn2" || r.GPUs[3].UtilMax != 20 || r.GPUs[0].Model != "H100" {
		t.Errorf("gpus %+v", r.GPUs)
	}
	g := r.Gym
	if g.RolloutSpans.Count != 2 || g.RolloutSpans.Max != 500 || !near(g.RolloutSpans.P50, 400) || g.VerifySpans["pass"] != 1 || !near(g.VerifySuccess, 0.5) {
		t.Errorf("gym %+v", g)
	}
	// Two rollouts from 1 s to 2.5 s: 80 per minute.
	if !near(g.RolloutsPerMinute, 80) {
		t.Errorf("rollouts per minute %v", g.RolloutsPerMinute)
	}
	if r.Errors.Spans != 1 || r.Errors.Logs != 1 || r.Errors.LogExamples[0].TraceID != "t2" || r.Errors.SpanExamples[0].TraceID != "t2" ||
		r.Errors.SpanExamples[0].Message != "rollout 1 failed" {
		t.Errorf("errors %+v", r.Errors)
	}
	if r.Spans.Total != 4 || r.Spans.ByName[0].Name != "gym.rollout" || r.Spans.ByName[0].TotalMs != 800 || r.Spans.Slowest[0].TraceID != "t2" || !r.Spans.Slowest[0].Error {
		t.Errorf("spans %+v", r.Spans)
	}
	if r.Health.BadLines != 1 || r.Health.Dirs[1].BadLines["metrics"] != 1 || r.Health.Dirs[1].NodeName != "gn2" {
		t.Errorf("health %+v", r.Health)
	}
	// Targets: the vLLM target answered its 3 scrapes; node and dcgm have
	// no up point at all.
	ts := r.Health.Dirs[0].Targets
	if len(ts) != 3 || ts[0].Job != "gym-vllm/policy" || ts[0].Scrapes != 3 || ts[0].Answered != 3 || len(r.Health.FailedTargets) != 2 {
		t.Errorf("targets %+v failed %+v", ts, r.Health.FailedTargets)
	}
	// A collector dir without receipt.json: said in the first lines.
	if len(r.Receipts) != 1 || r.Receipts[0].Missing == "" || len(r.Trouble) != 1 || !strings.Contains(r.Trouble[0], "no receipt.json in 1 of 1 node dirs") {
		t.Errorf("receipts %+v trouble %v", r.Receipts, r.Trouble)
	}

	// The terminal report fits 100 columns and names the figures.
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(b.String(), "\n") {
		if n := len([]rune(l)); n > Width {
			t.Errorf("line %d has %d columns: %q", i+1, n, l)
		}
	}
	for _, want := range []string{"gn2 gym-vllm/policy model m", "counters reset 1 time(s)", "idle the whole run: gn1/1", "rollout 1 failed", "1 did not parse"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
	// --json: the same report back.
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.ModelServers[1].PromptTokens != 190 || back.Version != ReportVersion || back.ModelServers[0].TTFT.P50.Known() {
		t.Errorf("JSON round trip: %+v", back.ModelServers)
	}
}

// TestBuildErrors: a node dir without files is an error naming it.
func TestBuildErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Build(dir); err == nil || !strings.Contains(err.Error(), dir+": no metrics.jsonl") {
		t.Errorf("empty dir: %v", err)
	}
}

// TestHTMLInChromium: the page opened in real headless Chromium: no
// console error, no network request, every chart drawn with pixels.
func TestHTMLInChromium(t *testing.T) {
	js, err := LoadChartJS("")
	if err != nil {
		testenv.Missing(t, err.Error())
		return
	}
	r, err := Build(writeJob(t))
	if err != nil {
		t.Fatal(err)
	}
	out := testenv.Artifacts(t)
	page := filepath.Join(out, "report.html")
	f, err := os.Create(page)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.WriteHTML(f, js); err != nil {
		t.Fatal(err)
	}
	f.Close()
	testenv.CheckPage(t, page, filepath.Join(out, "report.png"), "chart-queue", "chart-kvcache", "chart-gpu", "chart-e2e-0", "chart-e2e-1")
}

// TestSources: a job's node dirs, then each later link of its chain with
// its nodes; a job dir is taken as its otel/ dir.
func TestSources(t *testing.T) {
	job := t.TempDir()
	for _, d := range []string{"otel/nodes/gn2", "otel/nodes/gn3", "otel/links/102/nodes/gn2", "otel/links/101"} {
		if err := os.MkdirAll(filepath.Join(job, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, s := range Sources(job) {
		rel, _ := filepath.Rel(job, s.Dir)
		got = append(got, rel+"|"+s.Node+"|"+s.Link)
	}
	want := "otel||,otel/nodes/gn2|gn2|,otel/nodes/gn3|gn3|,otel/links/101||101,otel/links/102||102,otel/links/102/nodes/gn2|gn2|102"
	if strings.Join(got, ",") != want {
		t.Errorf("sources %v, want %s", got, want)
	}
}

// A short job whose node_exporter was scraped once: its CPUs are counted,
// their busy share is unknown (it needs two samples).
func TestHostOneScrape(t *testing.T) {
	job := t.TempDir()
	dir := filepath.Join(job, "otel")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var pts []string
	for cpu := 0; cpu < 4; cpu++ {
		for _, mode := range []string{"idle", "user"} {
			pts = append(pts, fmt.Sprintf(`{"attributes":[{"key":"cpu","value":{"stringValue":"%d"}},{"key":"mode","value":{"stringValue":"%s"}}],"timeUnixNano":"%d","asDouble":%d}`, cpu, mode, ns(0), 100+cpu))
		}
	}
	line := fmt.Sprintf(`{"resourceMetrics":[{"resource":%s,"scopeMetrics":[{"metrics":[`+
		`{"name":"node_cpu_seconds_total","sum":{"dataPoints":[%s],"aggregationTemporality":2,"isMonotonic":true}}]}]}]}`+"\n",
		res("gn1", "node", "gn1:9100"), strings.Join(pts, ","))
	if err := os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Build(job)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Hosts) != 1 || r.Hosts[0].CPUs != 4 || r.Hosts[0].CPUBusy.Known() {
		t.Fatalf("hosts %+v", r.Hosts)
	}
}

// TestNodesHostlist: the job's nodes are one Slurm hostlist in natural
// order, never cut at the line's width: 16 nodes are gn[1-16]; 60 nodes of
// distinct names wrap over lines, every name kept.
func TestNodesHostlist(t *testing.T) {
	var nodes []string
	for i := 16; i >= 1; i-- {
		nodes = append(nodes, fmt.Sprintf("gn%d", i))
	}
	var b strings.Builder
	if err := (&Report{Job: Job{Nodes: nodes}}).WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "\n  nodes                    gn[1-16]\n") {
		t.Errorf("16 nodes:\n%s", b.String())
	}
	nodes = nil
	for i := 0; i < 60; i++ {
		nodes = append(nodes, fmt.Sprintf("rack%d-gpu%d", i, 2*i))
	}
	b.Reset()
	if err := (&Report{Job: Job{Nodes: nodes}}).WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, l := range strings.Split(out, "\n") {
		if len(l) > Width || strings.HasSuffix(l, "...") {
			t.Errorf("line cut or too wide: %q", l)
		}
	}
	for _, n := range nodes {
		if !strings.Contains(out, n+",") && !strings.Contains(out, n+"\n") {
			t.Errorf("%s missing:\n%s", n, out)
		}
	}
}
