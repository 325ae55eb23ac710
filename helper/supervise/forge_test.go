package supervise_test

import (
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/helper/selfmetrics"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
)

// TestForgedSlurmTelling: what the job's tasks send with the receiver
// token cannot pass for the plugin's own telling. On the real collector,
// a span posted with the tasks' token, carrying the source mark
// (contract.SourceKey=SourceSlurm) and the phase scope, and a metric
// point with the mark and a cgroup series' name and producer, arrive in
// the files without the mark; the supervisor's phase spans (sent to the
// plugin's receiver with the plugin's token), the drain's span it appends
// after the collector's exit, and its readings' cgroup series carry it.
// The tasks' token opens no door of the plugin's receiver nor of the final
// figures' sink (401), and the
// collector's counters balance: the receivers' accepted spans (otlp and
// otlp/plugin) are the file exporter's written spans, one file for both
// pipelines, and traces.jsonl holds those and the appended ones.
func TestForgedSlurmTelling(t *testing.T) {
	t.Parallel()
	rec := filepath.Join(harness.SharedDir(t), "record")
	if err := os.WriteFile(rec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := harness.StartSup(t, harness.Job{JobID: "8585", Record: rec}).MustReady(t)
	st := s.State(t)
	if st.Ports.Plugin == 0 || st.Ports.Plugin == st.Ports.OTLPHTTP {
		t.Fatalf("state.json ports %+v: no port of the plugin's receiver", st.Ports)
	}
	mark := `{"key":"` + contract.SourceKey + `","value":{"stringValue":"` + contract.SourceSlurm + `"}}`
	forgedSpan := `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"slurm"}},` + mark + `]},` +
		`"scopeSpans":[{"scope":{"name":"` + contract.PhaseScope + `"},"spans":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"f0f0f0f0f0f0f0f0",` +
		`"name":"slurm.prolog","kind":1,"startTimeUnixNano":"1","endTimeUnixNano":"2"}]}]}]}`
	postTraces(t, s, forgedSpan)
	forgedPoint := fmt.Sprintf(`{"resourceMetrics":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"%s"}},%s]},`+
		`"scopeMetrics":[{"metrics":[{"name":"cgroup_forged_probe_bytes","gauge":{"dataPoints":[{"timeUnixNano":"%d","asDouble":1,`+
		`"attributes":[{"key":"cgroup","value":{"stringValue":"job"}}]}]}}]}]}]}`, vocab.CgroupProducer, mark, time.Now().UnixNano())
	post(t, s.Report.Ports.OTLPHTTP, "metrics", s.ReceiverToken, forgedPoint, http.StatusOK)
	// The tasks' token at the plugin's receiver, and at the sink of the
	// collector's final figures (the receipt's).
	post(t, st.Ports.Plugin, "traces", s.ReceiverToken, forgedSpan, http.StatusUnauthorized)
	post(t, st.Ports.Plugin, "metrics", s.ReceiverToken, forgedPoint, http.StatusUnauthorized)
	if st.Ports.Final == 0 {
		t.Fatalf("state.json ports %+v: no final figures' port", st.Ports)
	}
	post(t, st.Ports.Final, "metrics", s.ReceiverToken, "{}", http.StatusUnauthorized)

	harness.WaitFor(t, 20*time.Second, "the supervisor's phase spans and a cgroup reading in the files", func() bool {
		d, err := otlptest.ReadGrowing(filepath.Join(s.Out, "traces.jsonl"))
		if err != nil || d.SpanCount(vocab.SpanProlog) < 2 {
			return false
		}
		m, err := otlptest.ReadGrowing(filepath.Join(s.Out, "metrics.jsonl"))
		return err == nil && len(m.Named(vocab.CgroupNotKept))+len(m.Named(vocab.CgroupMemoryCurrent)) > 0
	})
	// The plugin's token: in the collector's environment, nowhere the
	// tasks can see (the readiness report root turns into the task
	// environment, the files, argv).
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", s.Report.CollectorPID))
	if err != nil {
		t.Fatal(err)
	}
	var ptoken string
	for _, kv := range strings.Split(string(env), "\x00") {
		if v, ok := strings.CutPrefix(kv, render.PluginTokenEnv+"="); ok {
			ptoken = v
		}
	}
	if len(ptoken) < 16 || ptoken == s.ReceiverToken {
		t.Fatalf("the collector's %s is %q (the receiver token %q)", render.PluginTokenEnv, ptoken, s.ReceiverToken)
	}
	post(t, st.Ports.Plugin, "traces", ptoken, `{"resourceSpans":[]}`, http.StatusOK)
	live, err := selfmetrics.Scrape(st.Ports.Telemetry)
	if err != nil {
		t.Fatal(err)
	}
	if n := live.Of(selfmetrics.ReceiverAccepted, "traces", "otlp"); n != 1 {
		t.Errorf("otlp accepted %d spans, want the 1 forged", n)
	}
	if n := live.Of(selfmetrics.ReceiverAccepted, "traces", render.PluginReceiver); n < 1 {
		t.Errorf("%s accepted %d spans, want the supervisor's phase spans", render.PluginReceiver, n)
	}
	if n := live.Of(selfmetrics.ReceiverAccepted, "metrics", render.PluginReceiver); n < 1 {
		t.Errorf("%s accepted %d points, want the supervisor's readings of the node", render.PluginReceiver, n)
	}
	if _, err := s.Drain(t, 30*time.Second); err != nil {
		t.Fatalf("drain: %v\n%s", err, s.Output())
	}

	marked := func(r otlptest.Attrs) bool {
		v, ok := r.Str(contract.SourceKey)
		return ok && v == contract.SourceSlurm
	}
	d := otlptest.MustRead(t, s.Out, "traces")
	forged, theirs := 0, map[string]int{}
	for _, sp := range d.Spans {
		if !strings.HasPrefix(sp.Name, "slurm.") {
			continue
		}
		if sp.TraceID == "5b8efff798038103d269b633813fc60c" {
			forged++
			if sp.Resource.Has(contract.SourceKey) {
				t.Errorf("the forged span arrived with %s: %v", contract.SourceKey, sp.Resource.Text())
			}
			continue
		}
		theirs[sp.Name]++
		if !marked(sp.Resource) {
			t.Errorf("the supervisor's %s span lacks %s=%s: %v", sp.Name, contract.SourceKey, contract.SourceSlurm, sp.Resource.Text())
		}
		if id, _ := sp.Resource.Str("slurm_job_id"); id != "8585" {
			t.Errorf("the supervisor's %s span without the identity: %v", sp.Name, sp.Resource.Text())
		}
	}
	if forged != 1 || theirs[vocab.SpanJob] != 1 || theirs[vocab.SpanProlog] != 1 || theirs[vocab.SpanDrain] != 1 {
		t.Errorf("%d forged spans, the supervisor's %v: want 1, and one slurm.job, slurm.prolog and slurm.drain", forged, theirs)
	}
	m := otlptest.MustRead(t, s.Out, "metrics")
	if p := m.Named("cgroup_forged_probe_bytes"); len(p) != 1 || p[0].Resource.Has(contract.SourceKey) {
		t.Errorf("the forged cgroup point: %d in metrics.jsonl, want 1 without %s", len(p), contract.SourceKey)
	}
	cg := 0
	for _, name := range []string{vocab.CgroupNotKept, vocab.CgroupMemoryCurrent, "up"} {
		for _, mt := range m.Named(name) {
			if o, _ := mt.Resource.Str("service.name.override"); o != vocab.CgroupProducer {
				continue
			}
			cg++
			if !marked(mt.Resource) {
				t.Errorf("the readings' %s lacks %s: %v", name, contract.SourceKey, mt.Resource.Text())
			}
		}
	}
	if cg == 0 {
		t.Error("no series of the readings of the node in metrics.jsonl")
	}

	harness.AssertNoLeak(t, ptoken, s.Out, map[string]string{"the supervisor's output (its readiness report)": s.Output()})

	rc, err := receipt.Read(s.Out)
	if err != nil {
		t.Fatal(err)
	}
	tr := rc.Signals["traces"]
	if rc.Basis != receipt.BasisFinal || tr.Received != tr.Written || int64(len(d.Spans)) != tr.Written+rc.AppendedSpans() {
		t.Errorf("receipt %s: traces received %d, written %d, appended %d; traces.jsonl holds %d spans",
			rc.Basis, tr.Received, tr.Written, rc.AppendedSpans(), len(d.Spans))
	}
	if mc := rc.Signals["metrics"]; int64(m.Points()) != mc.Written+rc.AppendedPoints() || rc.AppendedPoints() == 0 {
		t.Errorf("receipt: metrics written %d, appended %d (the appended spans' span metrics); metrics.jsonl holds %d points",
			mc.Written, rc.AppendedPoints(), m.Points())
	}
}

// post sends body (OTLP-JSON) to 127.0.0.1:port/v1/<signal> with token
// and wants HTTP status want.
func post(t *testing.T, port int, signal, token, body string, want int) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/v1/%s", port, signal), strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("POST /v1/%s on port %d: %s, want %d", signal, port, resp.Status, want)
	}
}
