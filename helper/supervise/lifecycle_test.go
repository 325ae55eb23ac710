package supervise_test

// Tests with real parts (issue 3): the real CLI `gym-otel-spank supervise`
// as a subprocess, the real collector (build/otelcol-gym), Debian's
// node_exporter, the stand-ins of tests/standins and a second collector as
// the OTLP/HTTP backend with bearer-token auth. A missing part skips, or
// fails under GYM_OTEL_REQUIRE_REAL=1 (internal/testenv).

import (
	"bytes"
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// vllmBounds are the vLLM stand-in's histogram buckets (tests/standins).
var vllmBounds = []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10}

// signalsClear reports whether pid runs with no signal ignored (SigIgn 0,
// process-wide) and no signal blocked (SigBlk 0) on some thread, sampling
// for up to d. Not every thread: a Go program whose main goroutine exits
// while locked to the main thread parks that thread with nearly all
// signals blocked (otelcol-gym does), and a thread being created blocks
// all for a moment. An inherited mask shows on every thread, because Go
// keeps inherited blocked signals it does not need (e.g. SIGUSR1) blocked.
func signalsClear(pid int, d time.Duration) (bool, string) {
	deadline := time.Now().Add(d)
	var why string
	for {
		why = ""
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return false, err.Error()
		}
		if ign := statusField(string(status), "SigIgn"); ign != 0 {
			return false, fmt.Sprintf("SigIgn = %x", ign)
		}
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, task := range tasks {
			data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name()))
			if err != nil {
				continue
			}
			blk := statusField(string(data), "SigBlk")
			if blk == 0 {
				return true, ""
			}
			why += fmt.Sprintf(" %x", blk)
		}
		if time.Now().After(deadline) {
			return false, "no thread with SigBlk 0:" + why
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// assertSignalsClear fails unless signalsClear holds for pid within 2 s.
func assertSignalsClear(t testing.TB, pid int) {
	t.Helper()
	if ok, why := signalsClear(pid, 2*time.Second); !ok {
		t.Errorf("pid %d: signals not clear: %s", pid, why)
	}
}

// assertDrainWithinEpilogWait fails when the drain (SIGTERM to the
// supervisor's exit) took longer than the epilog waits for it
// (timing.Policy.DrainWait: the collector's stop, the span-metrics settle
// and the supervisor's slack): past it the epilog kills the supervisor and
// the receipt is lost. The supervisor's own steps are bounded by timers,
// so this holds on a loaded machine too.
func assertDrainWithinEpilogWait(t testing.TB, s *harness.Sup, took time.Duration) {
	t.Helper()
	bound := s.Policy().DrainWait
	t.Logf("drain took %v (the epilog waits %v)", took.Round(time.Millisecond), bound)
	if took > bound {
		t.Errorf("drain took %v: past the epilog's wait of %v", took, bound)
	}
}

// assertAllParse parses every jsonl file of dir (every line must parse).
func assertAllParse(t testing.TB, dir string) {
	t.Helper()
	for _, sig := range []string{"metrics", "traces", "logs"} {
		if _, err := otlptest.Read(filepath.Join(dir, sig+".jsonl")); err != nil {
			t.Error(err)
		}
	}
}

// TestFullJob runs one job with every source and a real backend and checks
// the data, the identity, the backend, the token hygiene and the drain. The
// job has the default delivery (files: the supervisor sends the files)
// and token_resource_attribute: the backend holds exactly the files'
// items, each resource with the token as its Authorization attribute,
// which no file holds.
func TestFullJob(t *testing.T) {
	t.Parallel()
	// $, { and } in the token: a collector that expanded the value again
	// would send something else, and the backend would refuse it.
	token := "t$k{n}}${env:HOME}$$-" + harness.RandHex(8)
	be := harness.StartBackend(t, token)
	j := harness.Job{
		JobID: "90017", Node: "gn7", Token: token, Endpoint: be.URL,
		VLLMPort: harness.StartVLLM(t), DCGMPort: harness.StartDCGM(t), NodePort: harness.StartNodeExporter(t),
		Site: "  token_resource_attribute: true\n",
	}
	s := harness.StartSup(t, j).MustReady(t)
	assertSignalsClear(t, s.Report.CollectorPID)
	if s.ReceiverToken == "" || s.ReceiverToken == token {
		t.Fatalf("receiver token %q: want a per-job token distinct from the backend token", s.ReceiverToken)
	}
	harness.WaitMetricNames(t, s, 20*time.Second, "vllm_e2e_request_latency_seconds", "DCGM_FI_DEV_GPU_UTIL", "node_load1")
	gymOut := s.RunGym(t, "agent", 3, "e2b-test")

	// While everything runs: the token in no argv, no file.
	harness.AssertNoLeak(t, token, s.Out, map[string]string{"the supervisor's output": s.Output(), "the Gym stand-in's output": gymOut})

	// 3 rollouts (3 spans each name) sent 1 s before the drain.
	time.Sleep(time.Second)
	took, err := s.Drain(t, 30*time.Second)
	if err != nil {
		t.Fatalf("drain: %v\n%s", err, s.Output())
	}
	assertDrainWithinEpilogWait(t, s, took)
	s.AssertGone(t)
	harness.AssertNoLeak(t, token, s.Out, map[string]string{"the supervisor's output": s.Output()})
	if st := s.State(t); st.Status != jobdir.StatusDrained || st.ExportProblems != "" {
		t.Errorf("state.json: %+v; want drained without export problems", st)
	}

	m := otlptest.MustRead(t, s.Out, "metrics")
	tr := otlptest.MustRead(t, s.Out, "traces")
	lg := otlptest.MustRead(t, s.Out, "logs")

	// vLLM: types survive the rename.
	for _, mt := range m.Metrics {
		if strings.Contains(mt.Name, "vllm:") {
			t.Errorf("metric %q still contains vllm:", mt.Name)
		}
	}
	hist := m.Named("vllm_e2e_request_latency_seconds")
	if len(hist) == 0 {
		t.Fatal("no vllm_e2e_request_latency_seconds")
	}
	for _, h := range hist {
		if h.Histogram == nil || len(h.Histogram.DataPoints) == 0 {
			t.Fatalf("vllm_e2e_request_latency_seconds is not a histogram: %+v", h)
		}
		dp := h.Histogram.DataPoints[0]
		if !reflect.DeepEqual(dp.ExplicitBounds, vllmBounds) || len(dp.BucketCounts) != len(vllmBounds)+1 {
			t.Errorf("histogram bounds %v (%d buckets), want %v", dp.ExplicitBounds, len(dp.BucketCounts), vllmBounds)
		}
		if o, _ := h.Resource.Str("service.name.override"); o != "gym-vllm/policy" {
			t.Errorf("vLLM histogram: service.name.override %q", o)
		}
	}
	for _, c := range m.Named("vllm_prompt_tokens_total") {
		if c.Sum == nil || !c.Sum.IsMonotonic || c.Sum.AggregationTemporality != 2 {
			t.Errorf("vllm_prompt_tokens_total is not a monotonic cumulative sum: %+v", c)
		}
	}
	gauges := m.Named("vllm_num_requests_running")
	if len(m.Named("vllm_prompt_tokens_total")) == 0 || len(gauges) == 0 {
		t.Fatal("vllm_prompt_tokens_total or vllm_num_requests_running missing")
	}
	for _, g := range gauges {
		if g.Gauge == nil || len(g.Gauge.DataPoints) == 0 || !g.Gauge.DataPoints[0].Attributes.Has("engine") {
			t.Errorf("vllm_num_requests_running is not a gauge with an engine label: %+v", g)
		}
	}
	// dcgm and node.
	dcgm := m.Named("DCGM_FI_DEV_GPU_UTIL")
	if len(dcgm) == 0 || dcgm[0].Gauge == nil || !dcgm[0].Gauge.DataPoints[0].Attributes.Has("gpu") || !dcgm[0].Gauge.DataPoints[0].Attributes.Has("UUID") {
		t.Errorf("DCGM_FI_DEV_GPU_UTIL missing or without gpu/UUID: %+v", dcgm)
	}
	for _, d := range dcgm {
		if o, _ := d.Resource.Str("service.name.override"); o != "dcgm" {
			t.Errorf("dcgm series with service.name.override %q", o)
		}
	}
	nodeSeen := false
	for _, mt := range m.Metrics {
		if strings.HasPrefix(mt.Name, "node_") {
			nodeSeen = true
			if o, _ := mt.Resource.Str("service.name.override"); o != "node" {
				t.Errorf("node_exporter series %s with service.name.override %q", mt.Name, o)
			}
		}
	}
	if !nodeSeen {
		t.Error("no node_exporter series")
	}
	// The Gym stand-in's own histogram.
	if len(m.Named("gym.rollout.duration_ms")) == 0 {
		t.Error("no gym.rollout.duration_ms")
	}
	// Span metrics: dimensions and the last counts.
	calls := m.Named("traces.span.metrics.calls")
	if len(calls) == 0 || len(m.Named("traces.span.metrics.duration")) == 0 {
		t.Fatal("no span metrics (traces.span.metrics.calls / .duration)")
	}
	last := map[string]float64{}
	for _, c := range calls {
		if c.Sum == nil {
			t.Fatalf("traces.span.metrics.calls is not a sum")
		}
		for _, dp := range c.Sum.DataPoints {
			name, ok := dp.Attributes.Str("span.name")
			if !ok {
				t.Errorf("span metrics point without span.name: %+v", dp.Attributes)
				continue
			}
			if o, _ := dp.Attributes.Str("service.name.override"); o != "nemo-gym/agent" {
				t.Errorf("span metrics %s: service.name.override %q, want nemo-gym/agent", name, o)
			}
			if name == "sandbox.exec" {
				if p, _ := dp.Attributes.Str("nemo.gym.sandbox.provider"); p != "e2b-test" {
					t.Errorf("sandbox.exec span metrics: nemo.gym.sandbox.provider %q", p)
				}
			}
			last[name] = max(last[name], dp.Value())
		}
	}
	for _, name := range []string{"gym.rollout", "gym.verify", "sandbox.exec"} {
		if last[name] != 3 {
			t.Errorf("span metrics calls of %s = %v, want 3 (sent 1 s before the drain)", name, last[name])
		}
	}
	for _, d := range m.Named("traces.span.metrics.duration") {
		if d.Histogram == nil {
			t.Errorf("traces.span.metrics.duration is not a histogram")
		}
	}
	// Traces and logs complete.
	for _, name := range []string{"gym.rollout", "gym.verify", "sandbox.exec"} {
		if n := tr.SpanCount(name); n != 3 {
			t.Errorf("traces.jsonl: %d %s spans, want 3", n, name)
		}
	}
	if len(lg.Logs) != 3 {
		t.Errorf("logs.jsonl: %d records, want 3", len(lg.Logs))
	}

	// Identity on every resource of every file.
	id := identity{user: harness.CurrentUser(), jobID: j.JobID, node: j.Node,
		overrides: map[string]bool{"nemo-gym/agent": true, "gym-vllm/policy": true, "dcgm": true, "node": true, vocab.CgroupProducer: true}}
	checkIdentity(t, "metrics.jsonl", m, id)
	checkIdentity(t, "traces.jsonl", tr, id)
	checkIdentity(t, "logs.jsonl", lg, id)
	if seen := overridesSeen(m); len(seen) != 5 {
		t.Errorf("metrics.jsonl overrides %v, want all of %v", keys(seen), keys(id.overrides))
	}

	// The backend got all three signals, with the same identity.
	be.Stop(t)
	bm, bt, bl := otlptest.MustRead(t, be.Dir, "metrics"), otlptest.MustRead(t, be.Dir, "traces"), otlptest.MustRead(t, be.Dir, "logs")
	if len(bm.Metrics) == 0 || len(bt.Spans) == 0 || len(bl.Logs) == 0 {
		t.Fatalf("backend: %d metrics, %d spans, %d logs; want all three signals", len(bm.Metrics), len(bt.Spans), len(bl.Logs))
	}
	checkIdentity(t, "backend metrics", bm, id)
	checkIdentity(t, "backend traces", bt, id)
	checkIdentity(t, "backend logs", bl, id)
	// token_resource_attribute: the supervisor's sender added the token to
	// every resource it sent (the files never hold it: AssertNoLeak).
	for what, d := range map[string]otlptest.Data{"metrics": bm, "traces": bt, "logs": bl} {
		bad := 0
		for _, r := range d.Resources {
			if v, _ := r.Str("Authorization"); v != "Bearer "+token {
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("backend %s: %d of %d resources lack the token as their Authorization attribute", what, bad, len(d.Resources))
		}
	}
	if bt.SpanCount("gym.rollout") != 3 || len(bl.Logs) != 3 {
		t.Errorf("backend: %d gym.rollout spans, %d logs; want 3 and 3", bt.SpanCount("gym.rollout"), len(bl.Logs))
	}
	if len(bm.Named("vllm_e2e_request_latency_seconds")) == 0 || len(bm.Named("traces.span.metrics.calls")) == 0 {
		t.Error("backend: vLLM or span metrics missing")
	}

	// The receipt: final figures; the files' items are those written
	// (and appended), the supervisor's delivery acknowledged every one
	// of them, and the backend holds exactly the files' items (the
	// node_exporter series the allowlist keeps out of the file, counted
	// as file_filtered, reach neither).
	rc, err := receipt.Read(s.Out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("receipt:\n%s", strings.Join(rc.Summary(), "\n"))
	logFinalGain(t, s.Output())
	if !rc.Complete() || rc.Collectors != 1 || len(rc.Unknown) != 0 || rc.Trouble() || rc.JobID != j.JobID || rc.Node != j.Node {
		t.Errorf("receipt %+v: want final figures of one collector run without trouble", rc)
	}
	// The span metrics the supervisor appended after the collector's exit
	// (the late spans' the connector did not export) are in both files,
	// not in the collector's figures.
	ap := int(rc.AppendedPoints())
	files := map[string][2]int{"traces": {len(tr.Spans), len(bt.Spans)}, "metrics": {m.Points() - ap, bm.Points() - ap}, "logs": {len(lg.Logs), len(bl.Logs)}}
	for sig, n := range files {
		c := rc.Signals[sig]
		if c.Written != int64(n[0]) || n[1] != n[0] || c.Sent != 0 || c.Lost() != 0 {
			t.Errorf("receipt %s %+v: want written = %d (the file's items) = %d (the backend's items), nothing sent by the collector", sig, c, n[0], n[1])
		}
		if sig != "metrics" && c.Received != c.Written {
			t.Errorf("receipt %s: received %d, written %d; nothing filters %s", sig, c.Received, c.Written, sig)
		}
	}
	inFiles := int64(len(tr.Spans) + m.Points() + len(lg.Logs))
	if d := rc.Delivery; d == nil || !d.Complete() || d.Accepted != inFiles || d.Rejected != 0 {
		t.Errorf("receipt's delivery %+v: want every one of the files' %d items acknowledged, nothing past the checkpoint", rc.Delivery, inFiles)
	}
	if c := rc.Signals["metrics"]; c.FileFiltered == 0 {
		t.Errorf("receipt metrics %+v: the node allowlist kept nothing out of the file", c)
	}
	if sum := strings.Join(rc.Summary(), "\n"); !strings.Contains(sum, "final figures") || strings.Contains(sum, "LOST") {
		t.Errorf("receipt summary:\n%s", sum)
	}
}

// TestTokensArriveIntact sends to backends whose token looks like YAML or
// holds expansion syntax: each backend accepts only its exact token.
func TestTokensArriveIntact(t *testing.T) {
	t.Parallel()
	for _, tok := range []string{"123", "true", "[a]", "{b}:c", "p$q{r}s${env:PATH}$$"} {
		t.Run(tok, func(t *testing.T) {
			t.Parallel()
			be := harness.StartBackend(t, tok)
			s := harness.StartSup(t, harness.Job{JobID: "555", Token: tok, Endpoint: be.URL}).MustReady(t)
			s.RunGym(t, "agent", 1, "local")
			harness.WaitFor(t, 20*time.Second, "all three signals at the backend", func() bool {
				for _, sig := range []string{"traces", "metrics", "logs"} {
					if fi, err := os.Stat(filepath.Join(be.Dir, sig+".jsonl")); err != nil || fi.Size() == 0 {
						return false
					}
				}
				return true
			})
			if _, err := s.Drain(t, 30*time.Second); err != nil {
				t.Fatalf("drain: %v\n%s", err, s.Output())
			}
			if st := s.State(t); st.ExportProblems != "" {
				t.Errorf("export problems with token %q: %s", tok, st.ExportProblems)
			}
			be.Stop(t)
			if d := otlptest.MustRead(t, be.Dir, "traces"); d.SpanCount("gym.rollout") != 1 {
				t.Errorf("backend got %d gym.rollout spans, want 1", d.SpanCount("gym.rollout"))
			}
		})
	}
}

// grpcExport calls TraceService/Export over h2c with an empty request and
// returns the grpc-status.
func grpcExport(t testing.TB, port int, auth string) string {
	t.Helper()
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/opentelemetry.proto.collector.trace.v1.TraceService/Export", port), bytes.NewReader([]byte{0, 0, 0, 0, 0}))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("gRPC call: %v", err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if st := resp.Header.Get("Grpc-Status"); st != "" {
		return st
	}
	return resp.Trailer.Get("Grpc-Status")
}

// httpExport posts an empty OTLP/HTTP JSON trace request and returns the status.
func httpExport(t testing.TB, port int, auth string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/v1/traces", port), strings.NewReader(`{"resourceSpans":[]}`))
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("HTTP call: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestReceiverRequiresToken: OTLP without the per-job token, or with a
// wrong one, is refused on both receivers.
func TestReceiverRequiresToken(t *testing.T) {
	t.Parallel()
	s := harness.StartSup(t, harness.Job{JobID: "777"}).MustReady(t)
	good := "Bearer " + s.ReceiverToken
	for _, auth := range []string{"", "Bearer wrong-" + harness.RandHex(4), "Bearer " + s.ReceiverToken + "x", s.ReceiverToken} {
		if code := httpExport(t, s.Report.Ports.OTLPHTTP, auth); code != http.StatusUnauthorized {
			t.Errorf("OTLP/HTTP with Authorization %q: HTTP %d, want 401", auth, code)
		}
		if st := grpcExport(t, s.Report.Ports.OTLPGRPC, auth); st != "16" {
			t.Errorf("OTLP/gRPC with authorization %q: grpc-status %q, want 16 (Unauthenticated)", auth, st)
		}
	}
	// The control: the right token is accepted on both.
	if code := httpExport(t, s.Report.Ports.OTLPHTTP, good); code != http.StatusOK {
		t.Errorf("OTLP/HTTP with the receiver token: HTTP %d, want 200", code)
	}
	if st := grpcExport(t, s.Report.Ports.OTLPGRPC, good); st != "0" {
		t.Errorf("OTLP/gRPC with the receiver token: grpc-status %q, want 0", st)
	}
	// A real SDK client without the token gets nothing in.
	p := harness.StartProc(t, "gym-standin", s.GymEnv("-"), testenv.Standin(t, "gym-standin"), "--rollouts", "1", "--flush-timeout", "5s")
	p.Wait(t, 30*time.Second)
	if !strings.Contains(p.Out.String(), "flush=failed") {
		t.Errorf("gym-standin without the token: %s; want flush=failed", p.Out.String())
	}
	if _, err := s.Drain(t, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := otlptest.MustRead(t, s.Out, "traces"); len(d.Spans) != 0 {
		t.Errorf("%d spans were accepted without the token", len(d.Spans))
	}
}

// TestCollectorBackendFailures: otel.delivery: collector; a wrong token (401), a backend that is down and one
// that never answers: health stays up, local files stay complete, the drain
// is bounded and the refusal is reported.
func TestCollectorBackendFailures(t *testing.T) {
	t.Parallel()
	vllm := harness.StartVLLM(t)
	cases := []struct {
		name     string
		endpoint func(t *testing.T) (string, *harness.Backend)
	}{
		{"wrong-token", func(t *testing.T) (string, *harness.Backend) {
			be := harness.StartBackend(t, "the-right-token-"+harness.RandHex(4))
			return be.URL, be
		}},
		{"down", func(t *testing.T) (string, *harness.Backend) {
			return fmt.Sprintf("http://127.0.0.1:%d", harness.FreePort(t)), nil
		}},
		{"hang", func(t *testing.T) (string, *harness.Backend) { return harness.StartBlackhole(t, "hang"), nil }},
		{"401", func(t *testing.T) (string, *harness.Backend) { return harness.StartBlackhole(t, "401"), nil }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ep, be := c.endpoint(t)
			j := harness.Job{JobID: "31337", Endpoint: ep, VLLMPort: vllm, Token: "wrong-" + harness.RandHex(6), Site: "  delivery: collector\n"}
			s := harness.StartSup(t, j).MustReady(t)
			harness.WaitMetricNames(t, s, 20*time.Second, "vllm_e2e_request_latency_seconds")
			s.RunGym(t, "agent", 3, "local")
			// The exporter tries and fails (a refusal at once, a backend
			// down or hanging after its retries): the supervisor's read
			// of the collector's counters says so in state.json while the
			// collector runs.
			harness.WaitFor(t, 60*time.Second, "export problems in state.json while the collector runs", func() bool {
				st, err := jobdir.ReadState(s.Out)
				return err == nil && st.Status == jobdir.StatusReady && st.ExportProblems != ""
			})
			if !harness.HTTPOK(s.HealthURL()) {
				t.Error("health is not 200 while the backend fails")
			}
			took, err := s.Drain(t, 60*time.Second)
			t.Logf("exit %v", err)
			assertDrainWithinEpilogWait(t, s, took)
			if err != nil {
				t.Errorf("the drain did not exit 0: %v\n%s", err, s.Output())
			}
			s.AssertGone(t)
			st := s.State(t)
			if st.ExportProblems == "" {
				t.Errorf("state.json reports no export problems: %+v", st)
			}
			log, _ := os.ReadFile(filepath.Join(s.Out, "collector.log"))
			if !bytes.Contains(log, []byte("gym-otel: the backend refused or dropped data")) {
				t.Error("collector.log has no gym-otel: line about the refusal")
			}
			tr, lg, m := otlptest.MustRead(t, s.Out, "traces"), otlptest.MustRead(t, s.Out, "logs"), otlptest.MustRead(t, s.Out, "metrics")
			// The receipt: final figures; nothing reached the backend and
			// every item the files hold is counted as failed.
			rc, err := receipt.Read(s.Out)
			if err != nil {
				t.Fatal(err)
			}
			sum := strings.Join(rc.Summary(), "\n")
			t.Logf("receipt:\n%s", sum)
			logFinalGain(t, s.Output())
			if !rc.Complete() || !rc.Trouble() {
				t.Errorf("receipt: complete %v, trouble %v; want final figures with trouble", rc.Complete(), rc.Trouble())
			}
			// The span metrics appended after the collector's exit are not
			// the collector's.
			files := map[string]int{"traces": len(tr.Spans), "metrics": m.Points() - int(rc.AppendedPoints()), "logs": len(lg.Logs)}
			for sig, n := range files {
				c := rc.Signals[sig]
				if c.Written != int64(n) || c.Sent != 0 || c.Lost() != c.Written {
					t.Errorf("receipt %s %+v: want written = %d (the file's items) = failed, sent 0", sig, c, n)
				}
			}
			if !strings.Contains(sum, "LOST: the backend did not get") || !strings.Contains(sum, "replay") {
				t.Errorf("the receipt's summary does not say the backend lost data:\n%s", sum)
			}
			// inspect: a refused token says what to check, after the
			// LOST lines; a backend down or hung says nothing of it.
			insp, _ := exec.Command(harness.CLI(t), "inspect", "--no-sacct", s.Out).CombinedOutput()
			hint := strings.Contains(string(insp), "the backend answered HTTP 401 (collector.log): it did not accept the job's bearer token")
			if want := c.name == "wrong-token" || c.name == "401"; hint != want {
				t.Errorf("inspect: the 401 hint %v, want %v:\n%s", hint, want, insp)
			}
			for _, name := range []string{"gym.rollout", "gym.verify", "sandbox.exec"} {
				if n := tr.SpanCount(name); n != 3 {
					t.Errorf("traces.jsonl: %d %s spans, want 3", n, name)
				}
			}
			if len(lg.Logs) != 3 || len(m.Named("vllm_prompt_tokens_total")) == 0 || len(m.Named("traces.span.metrics.calls")) == 0 {
				t.Errorf("local files incomplete: %d logs, vLLM %d, span metrics %d", len(lg.Logs), len(m.Named("vllm_prompt_tokens_total")), len(m.Named("traces.span.metrics.calls")))
			}
			if be != nil {
				be.Stop(t)
				for _, sig := range []string{"traces", "metrics", "logs"} {
					if d := otlptest.MustRead(t, be.Dir, sig); d.Lines != 0 {
						t.Errorf("the backend accepted %d %s lines with a wrong token", d.Lines, sig)
					}
				}
			}
		})
	}
}

// pySigWrap starts argv with SIGTERM blocked and SIGHUP ignored, as
// slurmstepd may leave them, and SIGUSR1 blocked too: a Go program unblocks
// SIGTERM in its own threads but keeps SIGUSR1 blocked, so an inherited
// mask shows in the collector's SigBlk (and its own children would get
// SIGTERM blocked).
var pySigWrap = []string{"python3", "-c",
	"import os, signal, sys\n" +
		"signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGUSR1})\n" +
		"signal.signal(signal.SIGHUP, signal.SIG_IGN)\n" +
		"os.execv(sys.argv[1], sys.argv[1:])\n"}

// TestSignalsCleared: started with SIGTERM blocked and SIGHUP ignored, the
// collector still runs with an empty mask and no ignored signals, and the
// drain on SIGTERM works.
func TestSignalsCleared(t *testing.T) {
	t.Parallel()
	py, err := exec.LookPath("python3")
	if err != nil {
		testenv.Missing(t, "python3")
	}
	wrap := append([]string{py}, pySigWrap[1:]...)
	// The wrapper works: a plain program inherits what it set.
	out, err := exec.Command(wrap[0], append(wrap[1:], "/bin/cat", "/proc/self/status")...).CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	blk, ign := statusField(string(out), "SigBlk"), statusField(string(out), "SigIgn")
	if blk&(1<<(syscall.SIGTERM-1)) == 0 || blk&(1<<(syscall.SIGUSR1-1)) == 0 || ign&(1<<(syscall.SIGHUP-1)) == 0 {
		t.Fatalf("the wrapper does not set the mask: SigBlk %x SigIgn %x", blk, ign)
	}
	// The check sees an inherited mask: a program started through the
	// wrapper directly is not clear.
	ctl := harness.StartProc(t, "sleep", nil, append(append([]string{}, wrap...), "/bin/sleep", "30")...)
	harness.WaitFor(t, 5*time.Second, "the control's exec", func() bool {
		data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", ctl.Cmd.Process.Pid))
		return strings.TrimSpace(string(data)) == "sleep"
	})
	if ok, _ := signalsClear(ctl.Cmd.Process.Pid, 200*time.Millisecond); ok {
		t.Fatal("signalsClear does not see the mask the wrapper set")
	}
	ctl.Kill()

	s := harness.StartSup(t, harness.Job{JobID: "4711", Wrap: wrap, VLLMPort: harness.StartVLLM(t)}).MustReady(t)
	assertSignalsClear(t, s.Report.CollectorPID)
	// The supervisor itself (re-executed with a clean mask) too.
	assertSignalsClear(t, s.Cmd.Process.Pid)
	harness.WaitMetricNames(t, s, 20*time.Second, "vllm_prompt_tokens_total")
	took, err := s.Drain(t, 30*time.Second)
	if err != nil {
		t.Fatalf("drain: %v\n%s", err, s.Output())
	}
	assertDrainWithinEpilogWait(t, s, took)
	s.AssertGone(t)
	assertAllParse(t, s.Out)
}

// TestIgnoredSignalsClearedInPlace: started with SIGHUP ignored and
// nothing blocked (as the plugin's prolog starts it: signal 32 ignored),
// the supervisor sets the ignored signal back to its default in place,
// without re-executing itself (a second start of the program), and the
// collector runs with no ignored signal.
func TestIgnoredSignalsClearedInPlace(t *testing.T) {
	t.Parallel()
	py, err := exec.LookPath("python3")
	if err != nil {
		testenv.Missing(t, "python3")
	}
	wrap := []string{py, "-c", "import os, signal, sys\n" +
		"signal.signal(signal.SIGHUP, signal.SIG_IGN)\n" +
		"os.execv(sys.argv[1], sys.argv[1:])\n"}
	s := harness.StartSup(t, harness.Job{JobID: "4712", Wrap: wrap}).MustReady(t)
	assertSignalsClear(t, s.Report.CollectorPID)
	assertSignalsClear(t, s.Cmd.Process.Pid)
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", s.Cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(env), "GYM_OTEL_SIGNALS_CLEARED=") {
		t.Errorf("the supervisor re-executed itself for an ignored signal alone")
	}
}

// TestRunsAsUser: started as root with --user, the collector and every file
// are the user's.
func TestRunsAsUser(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root")
	}
	u := ensureGymUser(t)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	// The user's job dir in a 0755 dir, as on a cluster.
	jobDir := filepath.Join(harness.SharedDir(t), "job")
	if err := os.Mkdir(jobDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(jobDir, uid, gid); err != nil {
		t.Fatal(err)
	}
	s := harness.StartSup(t, harness.Job{JobID: "2001", User: "gymuser", VLLMPort: harness.StartVLLM(t), Output: filepath.Join(jobDir, "otel")}).MustReady(t)
	pid := s.Report.CollectorPID
	for _, k := range []string{"Uid", "Gid"} {
		want := strconv.Itoa(uid)
		if k == "Gid" {
			want = strconv.Itoa(gid)
		}
		for _, f := range strings.Fields(harness.ProcStatus(t, pid, k)) {
			if f != want {
				t.Errorf("collector %s: %q, want all %s", k, harness.ProcStatus(t, pid, k), want)
				break
			}
		}
	}
	if f := strings.Fields(harness.ProcStatus(t, s.Cmd.Process.Pid, "Uid")); len(f) == 0 || f[0] != strconv.Itoa(uid) {
		t.Errorf("supervisor Uid %v, want %d", f, uid)
	}
	assertSignalsClear(t, pid)
	harness.WaitMetricNames(t, s, 20*time.Second, "vllm_prompt_tokens_total")
	s.RunGym(t, "agent", 1, "local")
	if _, err := s.Drain(t, 30*time.Second); err != nil {
		t.Fatalf("drain: %v\n%s", err, s.Output())
	}
	s.AssertGone(t)
	n := 0
	filepath.WalkDir(s.Out, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		n++
		st := fi.Sys().(*syscall.Stat_t)
		if int(st.Uid) != uid || int(st.Gid) != gid {
			t.Errorf("%s is owned by %d:%d, want %d:%d", path, st.Uid, st.Gid, uid, gid)
		}
		return nil
	})
	if n < 7 { // the dir, collector.yaml, collector.log, state.json, 3 jsonl
		t.Errorf("only %d entries under %s", n, s.Out)
	}
	d := otlptest.MustRead(t, s.Out, "metrics")
	checkIdentity(t, "metrics.jsonl", d, identity{user: "gymuser", jobID: "2001", node: "gn7",
		overrides: map[string]bool{"gym-vllm/policy": true, "nemo-gym/agent": true, vocab.CgroupProducer: true}})
}

// statusField parses a hex field of a /proc/<pid>/status text.
func statusField(status, key string) uint64 {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return n
		}
	}
	return 0
}

// ensureGymUser creates gymuser (uid 2001) when absent.
func ensureGymUser(t testing.TB) *user.User {
	t.Helper()
	u, err := user.Lookup("gymuser")
	if err == nil {
		return u
	}
	if out, err := exec.Command("useradd", "-m", "-u", "2001", "gymuser").CombinedOutput(); err != nil {
		if u, err2 := user.Lookup("gymuser"); err2 == nil { // created concurrently
			return u
		}
		t.Fatalf("useradd gymuser: %v %s", err, out)
	}
	u, err = user.Lookup("gymuser")
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestStartFailures: the Report says failed, names the key or path, comes
// within the prolog's wait for it (the health timeout plus the report
// slack), and nothing is left running.
func TestStartFailures(t *testing.T) {
	t.Parallel()
	t.Run("missing binary", func(t *testing.T) {
		t.Parallel()
		bin := "/nonexistent/" + harness.RandHex(4) + "/otelcol"
		s := harness.StartSup(t, harness.Job{Binary: bin, Health: 2})
		assertFailed(t, s, "otel.binary", bin)
	})
	t.Run("unwritable output dir", func(t *testing.T) {
		t.Parallel()
		parent := harness.SharedDir(t) // 0755, root's
		j := harness.Job{Health: 2}
		if os.Getuid() == 0 {
			ensureGymUser(t)
			j.User = "gymuser"
		} else {
			os.Chmod(parent, 0o555)
		}
		j.Output = filepath.Join(parent, "otel")
		s := harness.StartSup(t, j)
		assertFailed(t, s, j.Output)
	})
	// A collector older than render.MinCollectorVersion is refused by the
	// version it logs at its start, and one that exits at once by its
	// --version; both errors name otel.binary and the version.
	t.Run("too old, logged", func(t *testing.T) {
		t.Parallel()
		bin := filepath.Join(harness.SharedDir(t), "old-collector")
		// Its --version claims a good one: the running collector's own
		// line decides.
		script := fmt.Sprintf("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'x version 0.161.0'; exit 0; fi\n"+
			"echo '2026-01-01T00:00:00.000Z\tinfo\tservice.go:1\tStarting otelcol-old...\t{\"Version\": \"0.100.0\", \"NumCPU\": 2}' >&2\n"+
			"exec %s \"$@\"\n", testenv.Collector(t))
		if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		s := harness.StartSup(t, harness.Job{Binary: bin, Health: 10})
		assertFailed(t, s, "otel.binary", "is version 0.100.0", render.MinCollectorVersion)
	})
	t.Run("too old, exits", func(t *testing.T) {
		t.Parallel()
		bin := filepath.Join(harness.SharedDir(t), "old-collector")
		script := "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'x version 0.99.1'; exit 0; fi\necho 'unknown component' >&2\nexit 1\n"
		if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		s := harness.StartSup(t, harness.Job{Binary: bin, Health: 2})
		assertFailed(t, s, "otel.binary", "is version 0.99.1", render.MinCollectorVersion)
	})
	t.Run("never healthy", func(t *testing.T) {
		t.Parallel()
		dir := harness.SharedDir(t)
		marker := strconv.Itoa(100000 + int(time.Now().UnixNano()%800000))
		bin := filepath.Join(dir, "binary")
		// Not exec: the shell's child must go with it.
		script := "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'x version 0.161.0'; exit 0; fi\nsleep " + marker + "\necho done\n"
		if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		s := harness.StartSup(t, harness.Job{Binary: bin, Health: 2})
		assertFailed(t, s, "otel.health_check_timeout_seconds")
		harness.WaitFor(t, 3*time.Second, "the supervisor's exit", func() bool { return !s.Running() })
		if left := harness.ProcsMatching("sleep\x00" + marker); len(left) > 0 {
			t.Errorf("the never-healthy collector's child is left running: pids %v", left)
		}
		if left := harness.ProcsMatching(bin); len(left) > 0 {
			t.Errorf("the never-healthy collector is left running: pids %v", left)
		}
	})
}

// assertFailed checks a failed Report, that it came within the prolog's
// wait for it (timing.Policy.ReportWait: a later report finds the prolog
// gone), and the supervisor's exit.
func assertFailed(t testing.TB, s *harness.Sup, mentions ...string) {
	t.Helper()
	if s.Report.Status != launch.StatusFailed {
		t.Fatalf("report %+v, want failed", s.Report)
	}
	for _, m := range mentions {
		if !strings.Contains(s.Report.Error, m) {
			t.Errorf("reason %q does not name %q", s.Report.Error, m)
		}
	}
	if within := s.Policy().ReportWait; s.ReportAfter > within {
		t.Errorf("failed reported after %v, past the prolog's wait of %v", s.ReportAfter, within)
	}
	if err := s.Wait(t, 5*time.Second); err == nil {
		t.Error("the supervisor exited 0 after failing")
	}
}

// TestTwoSupervisors: two jobs on one node at once.
func TestTwoSupervisors(t *testing.T) {
	t.Parallel()
	vllm := harness.StartVLLM(t)
	a := harness.StartSup(t, harness.Job{JobID: "1001", VLLMPort: vllm}).MustReady(t)
	b := harness.StartSup(t, harness.Job{JobID: "1002", VLLMPort: vllm}).MustReady(t)
	seen := map[int]string{}
	for name, p := range map[string]launch.Readiness{"a": a.Report, "b": b.Report} {
		for _, port := range []int{p.Ports.OTLPGRPC, p.Ports.OTLPHTTP, p.Ports.Health, p.Ports.Telemetry} {
			if port == 0 || seen[port] != "" {
				t.Errorf("port %d of %s is zero or shared with %s", port, name, seen[port])
			}
			seen[port] = name
		}
	}
	a.RunGym(t, "agent", 2, "local")
	b.RunGym(t, "judge", 2, "local")
	harness.WaitMetricNames(t, a, 20*time.Second, "vllm_prompt_tokens_total")
	harness.WaitMetricNames(t, b, 20*time.Second, "vllm_prompt_tokens_total")
	for _, s := range []*harness.Sup{a, b} {
		if _, err := s.Drain(t, 30*time.Second); err != nil {
			t.Fatalf("drain %s: %v", s.Job.JobID, err)
		}
		s.AssertGone(t)
	}
	for _, s := range []*harness.Sup{a, b} {
		server := map[string]string{"1001": "nemo-gym/agent", "1002": "nemo-gym/judge"}[s.Job.JobID]
		id := identity{user: harness.CurrentUser(), jobID: s.Job.JobID, node: "gn7", overrides: map[string]bool{server: true, "gym-vllm/policy": true, vocab.CgroupProducer: true}}
		for _, sig := range []string{"metrics", "traces", "logs"} {
			d := otlptest.MustRead(t, s.Out, sig)
			checkIdentity(t, s.Job.JobID+" "+sig, d, id)
		}
		if n := otlptest.MustRead(t, s.Out, "traces").SpanCount("gym.rollout"); n != 2 {
			t.Errorf("job %s: %d gym.rollout spans, want its own 2", s.Job.JobID, n)
		}
	}
}

// TestCrashRestart: a collector killed mid-job is restarted on the same
// ports and appends to the files.
func TestCrashRestart(t *testing.T) {
	t.Parallel()
	s := harness.StartSup(t, harness.Job{JobID: "6006", VLLMPort: harness.StartVLLM(t)}).MustReady(t)
	metrics := filepath.Join(s.Out, "metrics.jsonl")
	var before []byte
	harness.WaitFor(t, 20*time.Second, "3 complete lines in metrics.jsonl", func() bool {
		data, _ := os.ReadFile(metrics)
		if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
			before = data[:i+1]
		}
		return bytes.Count(before, []byte("\n")) >= 3
	})
	old := s.Report.CollectorPID
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var st jobdir.State
	harness.WaitFor(t, 15*time.Second, "a restarted, ready collector", func() bool {
		var err error
		if st, err = jobdir.ReadState(s.Out); err != nil {
			return false
		}
		return st.Restarts == 1 && st.Status == jobdir.StatusReady && st.CollectorPID != 0 && st.CollectorPID != old
	})
	if st.Ports != s.Report.Ports {
		t.Errorf("restarted on ports %+v, want the same %+v", st.Ports, s.Report.Ports)
	}
	if !harness.HTTPOK(s.HealthURL()) {
		t.Error("the restarted collector is not healthy on the same health port")
	}
	assertSignalsClear(t, st.CollectorPID)
	harness.WaitFor(t, 20*time.Second, "new lines after the restart", func() bool {
		data, _ := os.ReadFile(metrics)
		return bytes.Count(data, []byte("\n")) >= bytes.Count(before, []byte("\n"))+3
	})
	if _, err := s.Drain(t, 30*time.Second); err != nil {
		t.Fatalf("drain: %v\n%s", err, s.Output())
	}
	after, _ := os.ReadFile(metrics)
	if !bytes.HasPrefix(after, before) {
		t.Errorf("metrics.jsonl was truncated or rewritten: %d bytes before the crash no longer a prefix", len(before))
	}
	if st := s.State(t); st.Restarts != 1 {
		t.Errorf("state.json restarts = %d, want 1", st.Restarts)
	}
	log, _ := os.ReadFile(filepath.Join(s.Out, "collector.log"))
	if !bytes.Contains(log, []byte("gym-otel: the collector exited unexpectedly")) {
		t.Error("the restart is not logged in collector.log")
	}
	if harness.ProcAlive(st.CollectorPID, 0) {
		t.Errorf("the restarted collector %d is still running", st.CollectorPID)
	}
	assertAllParse(t, s.Out)

	// The receipt: the killed run's figures are lower bounds, said so.
	rc, err := receipt.Read(s.Out)
	if err != nil {
		t.Fatal(err)
	}
	sum := strings.Join(rc.Summary(), "\n")
	t.Logf("receipt:\n%s", sum)
	if rc.Complete() || rc.Basis != receipt.BasisLastRead || rc.Collectors != 2 || len(rc.Unknown) != 1 {
		t.Fatalf("receipt %+v: want lower bounds of 2 collector runs and one unknown", rc)
	}
	if u := rc.Unknown[0]; !strings.Contains(u, "collector run 1 exited unexpectedly (signal: killed)") || !strings.Contains(u, "is not counted") {
		t.Errorf("unknown: %q", u)
	}
	// The killed run's file exporter counted what it had buffered but not
	// flushed, so the file may hold less than counted; the unknown says so.
	points := otlptest.MustRead(t, s.Out, "metrics").Points()
	if c := rc.Signals["metrics"]; c.Written == 0 || points == 0 || !strings.Contains(rc.Unknown[0], "may be missing from the files") {
		t.Errorf("receipt metrics written %d, the file's points %d, unknown %q", c.Written, points, rc.Unknown[0])
	}
	for _, want := range []string{"INCOMPLETE, figures are lower bounds", "written >=", "UNKNOWN: collector run 1 exited unexpectedly"} {
		if !strings.Contains(sum, want) {
			t.Errorf("the receipt's summary lacks %q:\n%s", want, sum)
		}
	}
}

// TestKilledBeforeDrain: the collector is killed and the drain comes at
// once: the receipt says the figures are lower bounds and which run lacks
// what, whichever comes first, the restart or the drain.
func TestKilledBeforeDrain(t *testing.T) {
	t.Parallel()
	s := harness.StartSup(t, harness.Job{JobID: "6007", VLLMPort: harness.StartVLLM(t)}).MustReady(t)
	// A periodic read of the counters with metric points in them: the
	// supervisor says so once per collector run.
	harness.WaitFor(t, 20*time.Second, "the supervisor's read of the collector's counters", func() bool {
		return strings.Contains(s.Output(), "collector run 1: counters read, ")
	})
	if err := syscall.Kill(s.Report.CollectorPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s.Drain(t, 30*time.Second) // an error (the collector was gone) or not: the receipt counts
	rc, err := receipt.Read(s.Out)
	if err != nil {
		t.Fatal(err)
	}
	sum := strings.Join(rc.Summary(), "\n")
	t.Logf("receipt:\n%s", sum)
	if rc.Complete() || rc.Basis != receipt.BasisLastRead || len(rc.Unknown) == 0 {
		t.Fatalf("receipt %+v: want lower bounds and an unknown", rc)
	}
	if u := rc.Unknown[0]; !strings.Contains(u, "collector run 1 ") || !strings.Contains(u, "killed") || !strings.Contains(u, "is not counted") {
		t.Errorf("unknown[0] %q: want run 1, killed, what is not counted", u)
	}
	if c := rc.Signals["metrics"]; c.Received == 0 {
		t.Errorf("receipt metrics %+v: the last read's figures are missing", c)
	}
	if !strings.Contains(sum, "INCOMPLETE") || !strings.Contains(sum, "UNKNOWN: collector run 1") {
		t.Errorf("summary:\n%s", sum)
	}
}

// logFinalGain logs the supervisor's measurement of how far the final
// figures are beyond its last periodic read.
func logFinalGain(t *testing.T, out string) {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "final figures beyond the last periodic read") {
			t.Log(l)
		}
	}
}

// TestLivenessRecordRemoved: when the record disappears the supervisor
// drains and exits by itself.
func TestLivenessRecordRemoved(t *testing.T) {
	t.Parallel()
	rec := filepath.Join(harness.SharedDir(t), "record")
	if err := os.WriteFile(rec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := harness.StartSup(t, harness.Job{JobID: "8080", Record: rec, Env: []string{"GYM_OTEL_RECORD_POLL=200ms"}}).MustReady(t)
	// It keeps running while the record exists (five polls).
	time.Sleep(time.Second)
	if !s.Running() {
		t.Fatalf("the supervisor exited with the record present: %s", s.Output())
	}
	os.Remove(rec)
	start := time.Now()
	if err := s.Wait(t, 15*time.Second); err != nil {
		t.Fatalf("exit after the record was removed: %v\n%s", err, s.Output())
	}
	t.Logf("exited %v after the record was removed", time.Since(start))
	s.AssertGone(t)
	if st := s.State(t); st.Status != jobdir.StatusDrained {
		t.Errorf("state.json status %q, want drained", st.Status)
	}
}

// TestPortSquatterOfAnotherUser: another user (Debian's node_exporter run
// as nobody, which answers 200 on / like a health check) holds the port
// the supervisor first chose for the collector's health check. The
// supervisor never reports ready on it: it proves the listeners are not
// the collector's (or sees the collector fail to bind) and chooses new
// ports, on which the real collector is ready.
func TestPortSquatterOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (to run the squatter as another user)")
	}
	ne := testenv.Binary(t, "prometheus-node-exporter", "/usr/bin/prometheus-node-exporter")
	squat := harness.FreePort(t)
	p := harness.StartProc(t, "squatter", nil, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", ne,
		"--web.listen-address=127.0.0.1:"+strconv.Itoa(squat), "--collector.disable-defaults")
	_ = p
	harness.WaitFor(t, 10*time.Second, "the squatter", func() bool { return harness.HTTPOK(fmt.Sprintf("http://127.0.0.1:%d/", squat)) })
	first := fmt.Sprintf("%d,%d,%d,%d", harness.FreePort(t), harness.FreePort(t), squat, harness.FreePort(t))
	s := harness.StartSup(t, harness.Job{JobID: "8181", Env: []string{"GYM_OTEL_FIRST_PORTS=" + first}}).MustReady(t)
	if s.Report.Ports.Health == squat {
		t.Fatalf("ready on the squatted health port %d", squat)
	}
	out := s.Output()
	if !strings.Contains(out, "is held by a process that is not this job's collector") && !strings.Contains(out, "address already in use") {
		t.Errorf("the supervisor did not say why it chose new ports:\n%s", out)
	}
	if !harness.HTTPOK(s.HealthURL()) {
		t.Error("the collector on the new ports is not healthy")
	}
	t.Logf("first choice %s; ready on %+v", first, s.Report.Ports)
}

// TestSquatterAfterRestart: the collector is killed while its supervisor
// is stopped, and another user (Debian's node_exporter run as nobody, which
// answers 200 on / like a health check) binds the freed health port before
// the restart. The restarted collector cannot bind it; the squatter answers
// the health check. The supervisor proves the ports again after the
// restart, finds the squatter, stops its collector and gives up (exits with
// an error, state.json failed) instead of staying ready on another user's
// listener.
func TestSquatterAfterRestart(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (to run the squatter as another user)")
	}
	ne := testenv.Binary(t, "prometheus-node-exporter", "/usr/bin/prometheus-node-exporter")
	s := harness.StartSup(t, harness.Job{JobID: "8282"}).MustReady(t)
	health := s.Report.Ports.Health
	if err := syscall.Kill(s.Cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cont := func() { syscall.Kill(s.Cmd.Process.Pid, syscall.SIGCONT) }
	t.Cleanup(cont)
	if err := syscall.Kill(s.Report.CollectorPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 10*time.Second, "the killed collector's health port freed", func() bool {
		return !harness.HTTPOK(s.HealthURL())
	})
	harness.StartProc(t, "squatter", nil, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", ne,
		"--web.listen-address=127.0.0.1:"+strconv.Itoa(health), "--collector.disable-defaults")
	harness.WaitFor(t, 10*time.Second, "the squatter on the health port", func() bool { return harness.HTTPOK(s.HealthURL()) })
	cont()
	err := s.Wait(t, 30*time.Second)
	if err == nil {
		t.Fatalf("the supervisor exited cleanly after its ports were taken:\n%s", s.Output())
	}
	out := s.Output()
	if !strings.Contains(out, "is held by a process that is not this job's collector") &&
		!strings.Contains(out, "the collector does not listen on it") {
		t.Errorf("the supervisor did not say that a port is not its collector's:\n%s", out)
	}
	if st := s.State(t); st.Status != launch.StatusFailed || st.Restarts < 1 {
		t.Errorf("state.json %+v: want failed after a restart", st)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "giving up") {
			t.Log(l)
		}
	}
	s.AssertGone(t)
}
