package inspect

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// collectGymStandin runs the real collector with an OTLP/HTTP receiver and
// file exporters, sends it the Gym stand-in's telemetry under Gym's real
// names (every span group, 8 rollouts, outcome vocabulary outcomes), stops
// it, and returns the job dir holding otel/{metrics,traces}.jsonl.
func collectGymStandin(t *testing.T, outcomes string) string {
	t.Helper()
	bin, gym := testenv.Collector(t), testenv.Standin(t, "gym-standin")
	job := t.TempDir()
	dir := filepath.Join(job, "otel")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg := fmt.Sprintf(`receivers:
  otlp: {protocols: {http: {endpoint: %q}}}
exporters:
  file/metrics: {path: %q}
  file/traces: {path: %q}
service:
  telemetry: {metrics: {level: none}}
  pipelines:
    metrics: {receivers: [otlp], exporters: [file/metrics]}
    traces: {receivers: [otlp], exporters: [file/traces]}
`, addr, filepath.Join(dir, "metrics.jsonl"), filepath.Join(dir, "traces.jsonl"))
	cfgPath := filepath.Join(job, "collector.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	col := exec.Command(bin, "--config", cfgPath)
	col.Stdout, col.Stderr = os.Stderr, os.Stderr
	if err := col.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- col.Wait() }()
	defer func() {
		_ = col.Process.Signal(syscall.SIGTERM)
		<-done
	}()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collector never listened on %s", addr)
		}
	}
	cmd := exec.Command(gym, "--names", "gym", "--outcomes", outcomes, "--rollouts", "8", "--rollout-duration", "40ms")
	cmd.Env = []string{"NEMO_GYM_OTEL_ENABLED=1", "NEMO_GYM_OTEL_RUN_ID=r1", "NEMO_GYM_OTEL_SPAN_GROUPS=all",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + addr, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"SLURM_JOB_ID=4242", "SLURM_CLUSTER_NAME=c1", "PATH=/usr/bin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gym-standin: %v\n%s", err, out)
	}
	// The collector writes everything it received before it exits.
	if err := col.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the collector did not stop within 60 s of SIGTERM")
	}
	done <- nil
	return job
}

// TestGymRealNamesFromCollector: inspect's Gym figures from the files the
// real collector wrote while the stand-in emitted Gym's real names. Of 8
// rollouts, 3 and 7 fail verification (the verifier raised): verify success
// and rollout success are 6/8 in both outcome vocabularies; every rollout
// made one model call, one sandbox start and exec and one queue wait;
// rollouts 2 and 5 retried, rollout 4 timed out.
func TestGymRealNamesFromCollector(t *testing.T) {
	for _, vocab := range []struct{ flag, ok, bad string }{{"success", "success", "failure"}, {"scored", "scored", "dropped"}} {
		t.Run(vocab.flag, func(t *testing.T) {
			r, err := Build(collectGymStandin(t, vocab.flag))
			if err != nil {
				t.Fatal(err)
			}
			g, x := r.Gym, r.Gym.Telemetry
			if !near(g.VerifySuccess, 0.75) || x.VerifySource != mVerifyRate {
				t.Errorf("verify success %v from %q, want 0.75 from %s", g.VerifySuccess, x.VerifySource, mVerifyRate)
			}
			if x.RolloutOutcomes[vocab.ok] != 6 || x.RolloutOutcomes[vocab.bad] != 2 || !near(x.RolloutSuccess, 0.75) {
				t.Errorf("outcomes %v success %v", x.RolloutOutcomes, x.RolloutSuccess)
			}
			if g.VerifySpans["ok"] != 6 || g.VerifySpans["error"] != 2 {
				t.Errorf("verify spans %v", g.VerifySpans)
			}
			for what, q := range map[string]Quantiles{
				"verify duration": x.VerifyDuration, "model calls": x.ModelCalls["chat_completions"],
				"model ttfb": x.ModelTTFB["chat_completions"], "sandbox startup": x.SandboxStartup["local"],
				"sandbox exec spans": x.SandboxSpans["gym.sandbox.exec"], "queue wait": x.QueueWait["rollout_driver"],
				"rollout histogram": g.RolloutHistogram, "rollout spans": g.RolloutSpans,
			} {
				if q.Count != 8 || !q.Mean.Known() || q.Mean <= 0 {
					t.Errorf("%s: %+v, want 8 observations", what, q)
				}
			}
			if mc, tb := x.ModelCalls["chat_completions"], x.ModelTTFB["chat_completions"]; !(tb.Mean < mc.Mean) {
				t.Errorf("time to first byte %v not below the call's duration %v", tb.Mean, mc.Mean)
			}
			if x.HTTPRetries["server_disconnected"] != 2 || x.HTTPTimeouts["true"] != 1 {
				t.Errorf("retries %v timeouts %v", x.HTTPRetries, x.HTTPTimeouts)
			}
			gymNewerNames(t, x)
			// The text and the page carry them.
			var text, page bytes.Buffer
			if err := r.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			if err := r.WriteHTML(&page, nil); err != nil {
				t.Fatal(err)
			}
			for _, w := range []string{"token capture tokens", "sink.put 12000", "sandboxes held at end", "pool connects", "servers active", "gym start-up", "wait_for_model_endpoints", "server start-up (ms) venv_setup"} {
				if !strings.Contains(text.String(), w) {
					t.Errorf("the text lacks %q:\n%s", w, text.String())
				}
				if !strings.Contains(page.String(), w) || !strings.Contains(page.String(), `<pre id="gym-telemetry">`) {
					t.Errorf("the page's Gym telemetry lacks %q", w)
				}
			}
		})
	}
}

// gymNewerNames checks Gym's newer names as the stand-in emits them over 8
// rollouts: one token capture of 1500 tokens a rollout (the observable
// outcome and digest counters and the capped cache read at the last
// export); a sandbox exec each, rollouts 1 and 5 retrying the create, the
// last rollout's sandbox still held; one connection each, the even
// rollouts queued for it; one server active; the start-up's three
// supervisor stages, the server's spawn to ready and its four own stages.
func gymNewerNames(t *testing.T, x GymTelemetry) {
	t.Helper()
	c := x.TokenCapture
	if c == nil {
		t.Fatal("no token capture figures")
	}
	if q := c.OperationMs["sink.put"]; q.Count != 8 {
		t.Errorf("token capture operations %+v, want 8 sink.put", c.OperationMs)
	}
	if c.OperationTokens["sink.put"] != 12000 || c.Outcomes["captured/none"] != 8 || c.DigestCalls["prompt"] != 8 ||
		c.DigestBytes["prompt"] != 48000 || c.CacheSize["fingerprint"] != 4 {
		t.Errorf("token capture tokens %v outcomes %v digests %v/%v cache %v", c.OperationTokens, c.Outcomes, c.DigestCalls, c.DigestBytes, c.CacheSize)
	}
	if q := x.SandboxExec["local"]; q.Count != 8 || x.SandboxCreateRetries["local"] != 2 || x.SandboxActive["local"] != 1 {
		t.Errorf("sandbox exec %+v retries %v active %v, want 8, 2, 1", q, x.SandboxCreateRetries, x.SandboxActive)
	}
	if q := x.PoolQueue["policy_model"]; q.Count != 4 || x.PoolConnects["policy_model"] != 8 || !near(x.PoolQueuedShare, 0.5) {
		t.Errorf("pool queue %+v connects %v share %v, want 4 of 8", q, x.PoolConnects, x.PoolQueuedShare)
	}
	if x.ServersActive != 1 {
		t.Errorf("servers active %v, want 1", x.ServersActive)
	}
	st := x.Startup
	if st == nil {
		t.Fatal("no start-up figures")
	}
	var names []string
	for _, s := range st.Stages {
		names = append(names, s.Name)
		if !s.Seconds.Known() || s.Seconds <= 0 {
			t.Errorf("stage %s: %v seconds", s.Name, s.Seconds)
		}
	}
	if fmt.Sprint(names) != "[load_config spawn_servers wait_for_model_endpoints]" || st.Count != 1 || !(st.Seconds > 0) {
		t.Errorf("start-up stages %v, count %d, %v s", names, st.Count, st.Seconds)
	}
	if v := st.Servers["agent"]; !(v > 0) || !(v < st.Seconds) {
		t.Errorf("server agent spawn to ready %v s (start-up %v s)", v, st.Seconds)
	}
	for _, s := range []string{"venv_setup", "interpreter_start", "load_config", "uvicorn_startup"} {
		if st.ServerStages[s].Count != 1 {
			t.Errorf("server stage %s: %+v", s, st.ServerStages[s])
		}
	}
}

var updateGym = flag.Bool("update-gym", false, "rewrite testdata/gym-names/gym.golden.json")

// TestGymNamesGolden: the Gym section (counts, outcomes, shares, names) of
// the report of files the real
// collector wrote while the stand-in emitted Gym's real names (8 rollouts,
// every span group, the scored/dropped vocabulary; testdata/gym-names),
// against its golden JSON. Run with -update-gym to accept a change.
func TestGymNamesGolden(t *testing.T) {
	r, err := Build("testdata/gym-names")
	if err != nil {
		t.Fatal(err)
	}
	// Counts, outcomes, shares and names: what Gym's names mean. The
	// quantile figures (computed elsewhere, tested there) are left out.
	raw, err := json.Marshal(r.Gym)
	if err != nil {
		t.Fatal(err)
	}
	var tree any
	if err := json.Unmarshal(raw, &tree); err != nil {
		t.Fatal(err)
	}
	var prune func(v any)
	prune = func(v any) {
		if m, ok := v.(map[string]any); ok {
			for _, k := range []string{"mean", "p50", "p90", "p99", "max", "rollout_rate"} {
				delete(m, k)
			}
			for _, c := range m {
				prune(c)
			}
		}
	}
	prune(tree)
	got, err := json.MarshalIndent(tree, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", "gym-names", "gym.golden.json")
	if *updateGym {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update-gym to write it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("the Gym section differs from %s (go test -update-gym to accept):\n%s", path, got)
	}
	if !near(r.Gym.VerifySuccess, 0.75) || r.Gym.Telemetry.RolloutOutcomes["scored"] != 6 || r.Gym.Telemetry.RolloutOutcomes["dropped"] != 2 {
		t.Errorf("verify success %v, outcomes %v", r.Gym.VerifySuccess, r.Gym.Telemetry.RolloutOutcomes)
	}
}
