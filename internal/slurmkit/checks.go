package slurmkit

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/inspect"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// Inspect runs the CLI cli's `inspect` on a job's output dir path twice:
// with --json and --html, then as text; it keeps report.json, report.html
// and report.txt in the test's artifacts dir (testenv.Artifacts), logs
// the text and returns the parsed report, the text and the artifacts dir.
// A failing run or a report that is not JSON fails the test.
func Inspect(t testing.TB, cli, path string) (rep inspect.Report, text, art string) {
	t.Helper()
	art = testenv.Artifacts(t)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(cli, "inspect", "--json", "--html", filepath.Join(art, "report.html"), path)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("inspect --json: %v %s", err, stderr.String())
	}
	_ = os.WriteFile(filepath.Join(art, "report.json"), stdout.Bytes(), 0o644)
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(cli, "inspect", path).CombinedOutput()
	if err != nil {
		t.Fatalf("inspect: %v %s", err, out)
	}
	_ = os.WriteFile(filepath.Join(art, "report.txt"), out, 0o644)
	t.Logf("inspect of %s:\n%s", path, out)
	return rep, string(out), art
}

// FinalSample is what a short job left on one node for CheckFinalSample:
// the stand-in's final vllm_prompt_tokens_total (a number in Final), the
// driver's exit time (ReadTime's form, in Exit), the node's metrics.jsonl
// of the job's files and the backend's metrics.jsonl.
type FinalSample struct {
	Node, Job               string
	Final, Exit             string
	Metrics, BackendMetrics string
}

// CheckFinalSample asserts that the stand-in's final counter value is the
// last vllm_prompt_tokens_total of the node in the job's files, sampled
// after the driver exited, and (waited for up to Patience) the backend's
// last one. It returns the final value and the driver's exit time.
func CheckFinalSample(t testing.TB, s FinalSample) (want float64, exit time.Time) {
	t.Helper()
	final, err := os.ReadFile(s.Final)
	if err != nil {
		t.Fatal(err)
	}
	want, err = strconv.ParseFloat(strings.TrimSpace(string(final)), 64)
	if err != nil || want <= 0 {
		t.Fatalf("%s: final counter %q", s.Node, final)
	}
	exit = testenv.ReadTime(t, s.Exit)
	ps, err := otlptest.SumPoints(s.Metrics, "vllm_prompt_tokens_total")
	if err != nil {
		t.Fatal(err)
	}
	got, ok := otlptest.Latest(ps, s.Node, s.Job)
	switch {
	case !ok:
		t.Errorf("%s: no vllm_prompt_tokens_total in %s", s.Node, filepath.Dir(s.Metrics))
	case got.Value != want:
		t.Errorf("%s: the files' last vllm_prompt_tokens_total is %v (flags %d) at %v, the stand-in's final value %v (driver exit %v)", s.Node, got.Value, got.Flags, got.At, want, exit)
	case !got.At.After(exit):
		t.Errorf("%s: the last sample (%v) is not after the driver's exit (%v)", s.Node, got.At, exit)
	default:
		t.Logf("%s: final counter %v sampled %v after the driver's exit", s.Node, want, got.At.Sub(exit).Round(time.Millisecond))
	}
	var be otlptest.SumPoint
	for deadline := time.Now().Add(Patience); ; time.Sleep(200 * time.Millisecond) {
		ps, _ := otlptest.SumPoints(s.BackendMetrics, "vllm_prompt_tokens_total")
		be, ok = otlptest.Latest(ps, s.Node, s.Job)
		if ok && be.Value == want || time.Now().After(deadline) {
			break
		}
	}
	if !ok || be.Value != want {
		t.Errorf("%s: the backend's last vllm_prompt_tokens_total of job %s is %v (found %v), want %v", s.Node, s.Job, be.Value, ok, want)
	}
	return want, exit
}
