package replay_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestMain builds the real CLI for the end-to-end tests.
func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }

// runReplay runs `gym-otel-spank replay` with env (and PATH) and returns
// its output and exit code.
func runReplay(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	argv := append([]string{"replay", "--binary", testenv.Collector(t), "--progress", "1s", "--timeout", "90s"}, args...)
	cmd := exec.Command(harness.CLI(t), argv...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=/root"}, env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// TestReplayCollectorAfterOutage: a job with otel.delivery: collector (the
// collector's exporter; replay plans from the receipts, through a collector
// of its own) runs while its backend is down. Its receipt
// says the backend got nothing and what the files hold; then the backend
// comes up on the job's endpoint and `replay` (the token from OTEL_TOKEN, as
// at submit) sends every node dir's files: the backend ends up with every
// span, metric point and log record of the files. A second backend
// (--endpoint) gets them too; a wrong token exits non-zero.
func TestReplayCollectorAfterOutage(t *testing.T) {
	t.Parallel()
	token := "rp$${env:HOME}-" + harness.RandHex(8)
	port := harness.FreePort(t)
	j := harness.Job{JobID: "5150", Node: "gn1", Endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), Token: token,
		VLLMPort: harness.StartVLLM(t), NodePort: harness.StartNodeExporter(t), Site: "  delivery: collector\n"}
	s := harness.StartSup(t, j).MustReady(t)
	harness.WaitMetricNames(t, s, 20*time.Second, "vllm_e2e_request_latency_seconds", "node_load1")
	s.RunGym(t, "agent", 4, "local")
	time.Sleep(time.Second)
	if _, err := s.Drain(t, 60*time.Second); err != nil {
		t.Fatalf("drain: %v\n%s", err, s.Output())
	}
	// A second node's dir (a copy of this one's files), as a two-node job
	// leaves it: replay sends every node dir.
	second := filepath.Join(s.Out, "nodes", "gn2")
	if err := os.MkdirAll(second, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, sig := range []string{"traces", "metrics", "logs"} {
		data, err := os.ReadFile(filepath.Join(s.Out, sig+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(second, sig+".jsonl"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tr, m, lg := otlptest.MustRead(t, s.Out, "traces"), otlptest.MustRead(t, s.Out, "metrics"), otlptest.MustRead(t, s.Out, "logs")
	want := map[string]int{"traces": 2 * len(tr.Spans), "metrics": 2 * m.Points(), "logs": 2 * len(lg.Logs)}
	if len(tr.Spans) < 12 || m.Points() == 0 || len(lg.Logs) != 4 {
		t.Fatalf("the job's files: %d spans, %d points, %d log records", len(tr.Spans), m.Points(), len(lg.Logs))
	}

	// The receipt says the backend got nothing; inspect's first lines say so.
	rc, err := receipt.Read(s.Out)
	if err != nil {
		t.Fatal(err)
	}
	// The collector wrote and lost what the files hold but the lines its
	// supervisor appended after its exit (the span metrics the connector
	// had not flushed), which are counted apart.
	appended := map[string]int64{"traces": rc.AppendedSpans(), "metrics": rc.AppendedPoints()}
	for sig, n := range want {
		w := int64(n/2) - appended[sig]
		// The backend exporter also got the node_exporter series the
		// file's pipeline filters (local_node_metrics), counted apart.
		if c := rc.Signals[sig]; c.Sent != 0 || c.Lost() != w+c.FileFiltered || c.Written != w {
			t.Errorf("receipt %s %+v: want written = %d = failed - file_filtered, sent 0 (%d appended apart)", sig, c, w, appended[sig])
		}
	}
	var insp bytes.Buffer
	cmd := exec.Command(harness.CLI(t), "inspect", s.Out)
	cmd.Stdout, cmd.Stderr = &insp, &insp
	_ = cmd.Run()
	if first := firstLines(insp.String(), 12); !strings.Contains(first, "LOST: the backend did not get") {
		t.Errorf("inspect's first lines do not say the backend lost data:\n%s", first)
	}

	// The backend comes up where the job sent; replay fills it.
	be := harness.StartBackendOn(t, token, port)
	// The endpoint and the token's variable from the site file, as at submit.
	site := filepath.Join(s.Dir, "site.yaml")
	out, code := runReplay(t, []string{"OTEL_TOKEN=" + token}, "--site", site, s.Out)
	t.Logf("replay:\n%s", out)
	if code != 0 || !strings.Contains(out, "replay complete") {
		t.Fatalf("replay exit %d:\n%s", code, out)
	}
	be.Stop(t)
	checkBackendHas(t, be.Dir, want, 2*tr.SpanCount("gym.rollout"))

	// A second backend, named on the command line, with the token under
	// another variable.
	be2tok := "second-" + harness.RandHex(6)
	be2 := harness.StartBackend(t, be2tok)
	out, code = runReplay(t, []string{"OTHER_TOKEN=" + be2tok}, "--endpoint", be2.URL, "--token-env", "OTHER_TOKEN", s.Out)
	if code != 0 {
		t.Fatalf("replay to a second backend: exit %d:\n%s", code, out)
	}
	be2.Stop(t)
	checkBackendHas(t, be2.Dir, want, 2*tr.SpanCount("gym.rollout"))

	// A wrong token: the backend refuses, replay says so and exits 1.
	be3 := harness.StartBackend(t, "right-"+harness.RandHex(6))
	out, code = runReplay(t, []string{"OTEL_TOKEN=wrong"}, "--site", site, "--endpoint", be3.URL, s.Out)
	if code != 1 || !strings.Contains(out, "LOSSES") {
		t.Errorf("replay with a wrong token: exit %d, want 1 and LOSSES:\n%s", code, out)
	}
	// No token: a clear error naming the variable.
	out, code = runReplay(t, nil, "--site", site, s.Out)
	if code != 1 || !strings.Contains(out, "OTEL_TOKEN is not set") {
		t.Errorf("replay without a token: exit %d:\n%s", code, out)
	}
	harness.AssertNoLeak(t, token, s.Out, map[string]string{"replay's output": out})
}

// checkBackendHas checks a backend's files hold exactly n items per signal.
func checkBackendHas(t *testing.T, dir string, n map[string]int, rollouts int) {
	t.Helper()
	bt, bm, bl := otlptest.MustRead(t, dir, "traces"), otlptest.MustRead(t, dir, "metrics"), otlptest.MustRead(t, dir, "logs")
	got := map[string]int{"traces": len(bt.Spans), "metrics": bm.Points(), "logs": len(bl.Logs)}
	for sig, w := range n {
		if got[sig] != w {
			t.Errorf("backend %s: %d items, want %d (every item of the files)", sig, got[sig], w)
		}
	}
	if r := bt.SpanCount("gym.rollout"); r != rollouts {
		t.Errorf("backend: %d gym.rollout spans, want %d", r, rollouts)
	}
}

func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// TestReplayCollectorInterrupted: a job with otel.delivery: collector (no
// checkpoint: replay sends through a collector of its own); Ctrl-C while
// replay waits on a backend that hangs: replay exits non-zero and its
// collector is gone.
func TestReplayCollectorInterrupted(t *testing.T) {
	t.Parallel()
	s := harness.StartSup(t, harness.Job{JobID: "5151", VLLMPort: harness.StartVLLM(t), Site: "  delivery: collector\n"}).MustReady(t)
	s.RunGym(t, "agent", 2, "local")
	if _, err := s.Drain(t, 60*time.Second); err != nil {
		t.Fatalf("drain: %v", err)
	}
	hang := harness.StartBlackhole(t, "hang")
	cmd := exec.Command(harness.CLI(t), "replay", "--binary", testenv.Collector(t), "--progress", "500ms", "--endpoint", hang, "--token-env", "OTEL_TOKEN", s.Out)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "OTEL_TOKEN=x"}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); pw.Close() }()
	sc := bufio.NewScanner(pr)
	collector := 0
	var out strings.Builder
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if i := strings.Index(sc.Text(), "(collector pid "); i >= 0 {
			collector, _ = strconv.Atoi(strings.TrimSuffix(sc.Text()[i+len("(collector pid "):], ")"))
		}
		if strings.HasPrefix(sc.Text(), "replay: traces") { // a progress line: it is waiting
			break
		}
	}
	if collector == 0 || !harness.ProcAlive(collector, 0) {
		t.Fatalf("no running collector named in replay's output:\n%s", out.String())
	}
	cmd.Process.Signal(syscall.SIGINT)
	go io.Copy(&out, pr)
	select {
	case err := <-done:
		if err == nil {
			t.Error("replay exited 0 after an interrupt")
		}
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		t.Fatal("replay did not exit within 15 s of SIGINT")
	}
	if harness.ProcAlive(collector, 0) {
		syscall.Kill(collector, syscall.SIGKILL)
		t.Errorf("replay's collector %d outlived it", collector)
	}
}

// TestReplayHungBackendExit3: `replay` against the hung-backend stand-in
// (accepts connections, never answers): the files are intact, so it
// says NOT ANSWERED (not LOSSES), that nothing of the files is lost and
// to run replay again, and exits 3.
func TestReplayHungBackendExit3(t *testing.T) {
	t.Parallel()
	hang := harness.StartBlackhole(t, "hang")
	otel := filepath.Join(t.TempDir(), "otel")
	if err := os.MkdirAll(otel, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := "exporters:\n  otlp_http/backend:\n    endpoint: http://127.0.0.1:9\n    timeout: 1s\n    retry_on_failure:\n      enabled: true\n      initial_interval: 200ms\n      max_interval: 500ms\n      max_elapsed_time: 2s\n"
	spans := `{"resourceSpans":[{"resource":{},"scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","name":"a"}]}]}]}` + "\n"
	for name, data := range map[string]string{"collector.yaml": cfg, "traces.jsonl": spans + spans} {
		if err := os.WriteFile(filepath.Join(otel, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	out, code := runReplay(t, []string{"OTEL_TOKEN=x"}, "--endpoint", hang, "--token-env", "OTEL_TOKEN", otel)
	t.Logf("replay to a hung backend: exit %d after %v:\n%s", code, time.Since(start).Round(time.Millisecond), out)
	if code != 3 || !strings.Contains(out, "replay NOT ANSWERED: the backend "+hang+" did not answer within the bound") ||
		!strings.Contains(out, "nothing of the job's files is lost (they are unchanged): run replay again when the backend answers") || strings.Contains(out, "LOSSES") {
		t.Errorf("want exit 3 and the NOT ANSWERED verdict, without LOSSES")
	}
}
