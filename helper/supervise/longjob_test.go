package supervise_test

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// longJobDir is where TestLongJobTestdata writes, under the repository:
// the files inspect's long-job golden tests read (helper/inspect).
const longJobDir = "helper/inspect/testdata/longjob/otel"

// TestLongJobTestdata regenerates the output of a long job for inspect's
// golden tests: the real collector, started through `gym-otel-spank
// supervise`, scrapes the vLLM and dcgm stand-ins and Debian's
// node_exporter every second while the Gym stand-in (Gym's real names,
// every span group) runs rollouts of 400 ms for the whole job, and exports
// to a real backend. After the drain it writes the node dir's jsonl files
// gzipped, with collector.yaml, state.json and receipt.json, into
// helper/inspect/testdata/longjob/otel (then run the golden tests with
// -update: helper/inspect/testdata/longjob/README.md). It runs only when
// asked, for about GYM_OTEL_LONGJOB_SECONDS (default 180) plus a minute:
//
//	GYM_OTEL_LONGJOB=1 go test -run TestLongJobTestdata -v -timeout 20m ./helper/supervise
func TestLongJobTestdata(t *testing.T) {
	if os.Getenv("GYM_OTEL_LONGJOB") != "1" {
		t.Skip("set GYM_OTEL_LONGJOB=1 to regenerate " + longJobDir)
	}
	secs := 180
	if v := os.Getenv("GYM_OTEL_LONGJOB_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 30 {
			t.Fatalf("GYM_OTEL_LONGJOB_SECONDS=%q: want whole seconds, at least 30", v)
		}
		secs = n
	}
	token := "longjob-" + harness.RandHex(8)
	be := harness.StartBackend(t, token)
	j := harness.Job{
		JobID: "73001", Node: "gn1", Token: token, Endpoint: be.URL, Scrape: 1,
		VLLMPort: harness.StartVLLM(t), DCGMPort: harness.StartDCGM(t), NodePort: harness.StartNodeExporter(t),
		// The job's GPUs as Slurm names them (SLURM_JOB_GPUS), so the
		// report attributes both GPUs to the job and gives its energy.
		Args: []string{"--gpus", "0,1"},
	}
	s := harness.StartSup(t, j).MustReady(t)
	start := time.Now()
	harness.WaitMetricNames(t, s, 20*time.Second, "vllm_e2e_request_latency_seconds", "DCGM_FI_DEV_GPU_UTIL", "node_load1")

	// Rollouts of 400 ms for all but the last 10 s of the job; every 9th
	// ends in error.
	rollouts := max(1, (secs-10-int(time.Since(start).Seconds()))*10/4)
	gym := harness.StartProc(t, "gym-standin", s.GymEnv(""), testenv.Standin(t, "gym-standin"),
		"--server", "agent", "--names", "gym", "--rollouts", strconv.Itoa(rollouts),
		"--rollout-duration", "400ms", "--error-every", "9", "--sandbox-provider", "local", "--flush-timeout", "10s")
	if err := gym.Wait(t, time.Duration(secs)*time.Second+time.Minute); err != nil || !strings.Contains(gym.Out.String(), "flush=ok") {
		t.Fatalf("gym-standin: %v\n%s", err, gym.Out.String())
	}
	// The rest of the job: only the scrapes.
	harness.WaitFor(t, time.Duration(secs)*time.Second, "the job's length", func() bool { return time.Since(start) >= time.Duration(secs)*time.Second })
	if _, err := s.Drain(t, 30*time.Second); err != nil {
		t.Fatalf("drain: %v\n%s", err, s.Output())
	}
	s.AssertGone(t)
	be.Stop(t)
	if st := s.State(t); st.Status != jobdir.StatusDrained || st.ExportProblems != "" {
		t.Fatalf("state.json: %+v; want drained without export problems", st)
	}
	rc, err := receipt.Read(s.Out)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Trouble() || !rc.Complete() {
		t.Fatalf("receipt: %v", rc.Summary())
	}
	harness.AssertNoLeak(t, token, s.Out, nil)

	dst := filepath.Join(testenv.Root(), longJobDir)
	if err := os.RemoveAll(dst); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"metrics.jsonl", "traces.jsonl", "logs.jsonl"} {
		gzipFile(t, filepath.Join(s.Out, name), filepath.Join(dst, name+".gz"))
	}
	for _, name := range []string{"collector.yaml", "state.json", receipt.FileName} {
		data, err := os.ReadFile(filepath.Join(s.Out, name))
		if err != nil {
			t.Fatal(err)
		}
		// The run's temporary dir stands for the job's otel/ dir.
		data = []byte(strings.ReplaceAll(string(data), s.Out, "/jobs/longjob/otel"))
		if err := os.WriteFile(filepath.Join(dst, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d rollouts over %v; wrote %s", rollouts, time.Since(start).Round(time.Second), dst)
}

// gzipFile writes src gzipped (best compression) to dst.
func gzipFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	zw, _ := gzip.NewWriterLevel(out, gzip.BestCompression)
	if _, err := io.Copy(zw, in); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
