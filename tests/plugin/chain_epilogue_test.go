package plugin_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// A chain link submitted at the end of the script, after the driver has
// exited (Gym's resume epilogue runs after the driver step): the nested
// sbatch is still a link. It carries no token of its own (the job's steps
// removed it), takes the running job's, and the next job runs as a link
// of the same run: its files under otel/links/<id>, the same run_id, and
// its data accepted by the token-checking backend.
//
// "draining": before the submit, the test stops the first link's
// collector (SIGSTOP, so its shutdown stalls) and asks its supervisor to
// drain (SIGTERM, as at the job's end), and lets the script submit only
// once state.json says draining. "gone": the collector and its supervisor
// have ended before the submit: no process of the job holds the token
// any more (it is written nowhere else), so the nested sbatch is refused,
// saying why and what to do.
func TestChainLinkAfterDriver(t *testing.T) {
	vllm := testenv.Standin(t, "vllm-standin")
	if out, err := run("install", "-m", "0755", vllm, filepath.Join(plugDir, "vllm-standin")); err != nil {
		t.Fatalf("install: %v %s", err, out)
	}
	for i, mode := range []string{"ready", "draining", "gone"} {
		t.Run(mode, func(t *testing.T) {
			waitIdle(t)
			chainAfterDriver(t, mode, shifted(18131+i))
		})
	}
}

func chainAfterDriver(t *testing.T, mode, port string) {
	tag := mode + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	base := filepath.Join(jobsDir, "epi-"+tag)
	cfg, runDir := writeChainConfig(t, base, port, "epi-model")
	script := base + ".sh"
	// The first link: the "driver" (a vLLM stand-in the collector scrapes)
	// runs and exits; the script then waits for the test's go-ahead and
	// submits the next link as its last line. The next link runs the
	// driver and ends.
	body := fmt.Sprintf(`#!/bin/bash
#SBATCH --gym-otel=config=%[1]s,run_id=repi-%[2]s,benchmark=b1,shutdown_timeout_seconds=60
#SBATCH -o %[3]s.link-%%j.out
echo "$SLURM_JOB_ID" >> %[3]s.chain
%[4]s/vllm-standin --port %[6]s --model epi-model --scrape-log %[3]s.scrapes.$SLURM_JOB_ID &
driver=$!
for i in $(seq 1 1800); do [ -s %[3]s.scrapes.$SLURM_JOB_ID ] && break; sleep 0.1; done
kill $driver; wait $driver
[ -n "${1:-}" ] && exit 0
touch %[3]s.driver-exited
for i in $(seq 1 1800); do [ -e %[3]s.go ] && break; sleep 0.1; done
sbatch --dependency=afterany:$SLURM_JOB_ID --kill-on-invalid-dep=yes %[5]s $SLURM_JOB_ID > %[3]s.answer 2>&1 && mv %[3]s.answer %[3]s.next || mv %[3]s.answer %[3]s.next-failed
`, cfg, tag, base, plugDir, script, port)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	r := asUser(t, 60*time.Second, tokenEnv(), "sbatch "+script)
	if r.code != 0 {
		t.Fatalf("sbatch: exit %d: %s", r.code, r.stderr)
	}
	first := jobIDOf(t, r)
	waitFile(t, 3*time.Minute, base+".driver-exited")
	stateFile := filepath.Join(runDir, "otel", "state.json")
	var st struct {
		Status        string `json:"status"`
		SupervisorPID int    `json:"supervisor_pid"`
		CollectorPID  int    `json:"collector_pid"`
	}
	readState := func() {
		b, err := os.ReadFile(stateFile)
		if err != nil {
			t.Fatalf("job %s: %v", first, err)
		}
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatalf("%s: %v", stateFile, err)
		}
	}
	readState()
	if st.Status != "ready" || st.CollectorPID <= 0 || st.SupervisorPID <= 0 {
		t.Fatalf("job %s after its driver exited: state %+v, want ready with a collector", first, st)
	}
	collector, supervisor := st.CollectorPID, st.SupervisorPID
	switch mode {
	case "draining":
		// The collector stalls in its shutdown until the test continues it.
		if err := syscall.Kill(collector, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer syscall.Kill(collector, syscall.SIGCONT)
		if err := syscall.Kill(supervisor, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute)
		for readState(); st.Status != "draining"; readState() {
			if time.Now().After(deadline) {
				t.Fatalf("job %s: state %q a minute after the drain request, want draining", first, st.Status)
			}
			time.Sleep(50 * time.Millisecond)
		}
	case "gone":
		if err := syscall.Kill(supervisor, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute)
		for running(supervisor) || running(collector) {
			if time.Now().After(deadline) {
				t.Fatalf("job %s: the supervisor (%d) or the collector (%d) still runs a minute after the drain request", first, supervisor, collector)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := os.WriteFile(base+".go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Wait for the submit's answer, then for the queue to empty.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		_, e1 := os.Stat(base + ".next")
		_, e2 := os.Stat(base + ".next-failed")
		if (e1 == nil) != (e2 == nil) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: the script's last line (the nested sbatch) did not run in 5 minutes", first)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if mode == "draining" {
		syscall.Kill(collector, syscall.SIGCONT)
	}
	if mode == "gone" {
		b, err := os.ReadFile(base + ".next-failed")
		if err != nil {
			out, _ := os.ReadFile(base + ".next")
			t.Fatalf("with no collector or supervisor of the job left, the nested sbatch was accepted: %s", out)
		}
		for _, want := range []string{"OTEL_TOKEN is not set in this nested submit, and the token of the running job could not be taken over", "export OTEL_TOKEN=<bearer token> before this sbatch"} {
			if !strings.Contains(string(b), want) {
				t.Errorf("the refusal lacks %q:\n%s", want, b)
			}
		}
		if strings.Contains(string(b), backendToken) {
			t.Errorf("the refusal shows the token")
		}
		waitJobState(t, first, 3*time.Minute, "COMPLETED", "FAILED")
		waitNoCollector(t)
		waitIdle(t)
		return
	}
	if b, err := os.ReadFile(base + ".next-failed"); err == nil {
		t.Fatalf("the nested sbatch after the driver exited (collector %s) was refused:\n%s", mode, b)
	}
	next, _ := os.ReadFile(base + ".next")
	m := regexp.MustCompile(`Submitted batch job (\d+)`).FindStringSubmatch(string(next))
	if m == nil {
		t.Fatalf("nested sbatch said %q", next)
	}
	second := m[1]
	waitJobState(t, second, 5*time.Minute, "COMPLETED")
	if chain, _ := os.ReadFile(base + ".chain"); strings.Join(strings.Fields(string(chain)), " ") != first+" "+second {
		t.Fatalf("links ran: %q, want %s %s", chain, first, second)
	}
	// The second job is a link: its files in otel/links/<id>, this link's
	// job id and the run's run_id in them.
	dir := filepath.Join(runDir, "otel", "links", second)
	cy, err := os.ReadFile(filepath.Join(dir, "collector.yaml"))
	if err != nil {
		t.Fatalf("job %s is not a link of %s: %v", second, first, err)
	}
	if id, err := render.ConfigIdentity(cy); err != nil || id["slurm_job_id"] != second {
		t.Errorf("%s/collector.yaml is not job %s's", dir, second)
	}
	metrics, _ := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	if !strings.Contains(string(metrics), "vllm_num_requests_running") || !strings.Contains(string(metrics), "repi-"+tag) {
		t.Errorf("job %s: no vLLM metrics of run repi-%s in %s/metrics.jsonl", second, tag, dir)
	}
	// The token it took over is the backend's: the backend, which checks
	// it, holds the link's metrics with the run's identity.
	var got []map[string]string
	for end := time.Now().Add(patience); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if got = backendResources(t, "metrics", second, "vllm_num_requests_running"); len(got) > 0 {
			break
		}
	}
	if len(got) == 0 {
		t.Fatalf("the backend holds no metrics of link %s: its token was not accepted", second)
	}
	if got[0]["run_id"] != "repi-"+tag {
		t.Errorf("link %s at the backend: run_id %q, want repi-%s", second, got[0]["run_id"], tag)
	}
	waitNoCollector(t)
	waitIdle(t)
}

// running reports whether pid is a process that has not exited (a zombie
// left for a parent that does not reap it has).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}
