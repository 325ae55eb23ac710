package plugin_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// Gym's auto-resume chain: the batch script submits its own next link with
// a nested sbatch (dependency afternotok on itself) before its work, then
// fails; the next link runs. The nested sbatch inherits --gym-otel but not
// the token (the steps removed it from the job): it must still be
// accepted, the link must get its own collector, share the job dir and
// run_id, and keep its own files beside the first link's.
func TestGymAutoResumeChain(t *testing.T) {
	waitIdle(t)
	vllm := testenv.Standin(t, "vllm-standin")
	if out, err := run("install", "-m", "0755", vllm, filepath.Join(plugDir, "vllm-standin")); err != nil {
		t.Fatalf("install: %v %s", err, out)
	}
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	base := filepath.Join(jobsDir, "chain-"+tag)
	cfg, runDir := writeChainConfig(t, base, "18124", "chain-model")
	script := filepath.Join(jobsDir, "chain-"+tag+".sh")
	body := fmt.Sprintf(`#!/bin/bash
#SBATCH --gym-otel=config=%[1]s,run_id=rchain-%[2]s,benchmark=b1
#SBATCH -o %[3]s.link-%%j.out
echo "$SLURM_JOB_ID" >> %[3]s.chain
env | grep -E '^(OTEL_|NEMO_GYM_OTEL_|GYM_OTEL_)' | sort > %[3]s.env.$SLURM_JOB_ID
if [ -z "${1:-}" ]; then
    # Gym's auto-resume prologue, as its Slurm executor renders it.
    next=$(sbatch --dependency=afternotok:$SLURM_JOB_ID --kill-on-invalid-dep=yes %[5]s $SLURM_JOB_ID 2>&1) \
        && echo "$next" > %[3]s.next || echo "$next" > %[3]s.next-failed
fi
%[4]s/vllm-standin --port 18124 --model chain-model --scrape-log %[3]s.scrapes.$SLURM_JOB_ID &
sp=$!
# Until this link's collector has scraped the server (its first scrape
# comes within an interval of its start, later on a loaded machine).
for i in $(seq 1 1800); do [ -s %[3]s.scrapes.$SLURM_JOB_ID ] && break; sleep 0.1; done
# Free the port before this link ends: the next link's service takes it.
kill $sp; wait $sp
[ -z "${1:-}" ] && exit 3
exit 0
`, cfg, tag, base, plugDir, script)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	r := asUser(t, 60*time.Second, tokenEnv(), "sbatch "+script)
	if r.code != 0 {
		t.Fatalf("sbatch: exit %d: %s", r.code, r.stderr)
	}
	first := jobIDOf(t, r)
	deadline := time.Now().Add(5 * time.Minute)
	for {
		q, _ := run("squeue", "-h", "-o", "%i")
		chain, _ := os.ReadFile(base + ".chain")
		if strings.TrimSpace(q) == "" && len(strings.Fields(string(chain))) >= 2 {
			break
		}
		if _, err := os.Stat(base + ".next-failed"); err == nil && strings.TrimSpace(q) == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the chain did not finish in 5 minutes: queue %q, links %q", q, chain)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if b, err := os.ReadFile(base + ".next-failed"); err == nil {
		t.Fatalf("the nested sbatch (Gym's auto-resume) was refused:\n%s", b)
	}
	next, _ := os.ReadFile(base + ".next")
	m := regexp.MustCompile(`Submitted batch job (\d+)`).FindStringSubmatch(string(next))
	if m == nil {
		t.Fatalf("nested sbatch said %q", next)
	}
	second := m[1]
	if chain, _ := os.ReadFile(base + ".chain"); strings.Join(strings.Fields(string(chain)), " ") != first+" "+second {
		t.Fatalf("links ran: %q, want %s %s", chain, first, second)
	}
	// Each link: its own collector, its own files, the shared run_id.
	for _, l := range []struct{ id, dir string }{
		{first, filepath.Join(runDir, "otel")},
		{second, filepath.Join(runDir, "otel", "links", second)},
	} {
		env, _ := os.ReadFile(base + ".env." + l.id)
		if !strings.Contains(string(env), "NEMO_GYM_OTEL_RUN_ID=rchain-"+tag+"\n") ||
			!strings.Contains(string(env), "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:") ||
			!strings.Contains(string(env), "GYM_OTEL_JOB="+l.id+"\n") {
			t.Errorf("job %s: task env without this link's telemetry env:\n%s", l.id, env)
		}
		if strings.Contains(string(env), backendToken) {
			t.Errorf("job %s: the backend token is in the task env", l.id)
		}
		cy, err := os.ReadFile(filepath.Join(l.dir, "collector.yaml"))
		if err != nil {
			t.Errorf("job %s: %v", l.id, err)
			continue
		}
		if id, err := render.ConfigIdentity(cy); err != nil || id["slurm_job_id"] != l.id {
			t.Errorf("job %s: %s/collector.yaml is not this link's", l.id, l.dir)
		}
		metrics, _ := os.ReadFile(filepath.Join(l.dir, "metrics.jsonl"))
		if !strings.Contains(string(metrics), "vllm_num_requests_running") || !strings.Contains(string(metrics), `"`+l.id+`"`) {
			t.Errorf("job %s: no vLLM metrics of this link in %s/metrics.jsonl", l.id, l.dir)
		}
		if !strings.Contains(string(metrics), "rchain-"+tag) {
			t.Errorf("job %s: run_id rchain-%s not in %s/metrics.jsonl", l.id, tag, l.dir)
		}
	}
	// The first link's files hold nothing of the second.
	if m, _ := os.ReadFile(filepath.Join(runDir, "otel", "metrics.jsonl")); strings.Contains(string(m), `"slurm_job_id","value":{"stringValue":"`+second+`"`) {
		t.Errorf("the first link's metrics.jsonl holds the second link's data")
	}
	waitNoCollector(t)
	waitIdle(t)
}

// A Gym that still renders its own collector step puts the OTel settings on
// the driver's srun line: the plugin keeps them (a set value wins) and
// says so once in that step, naming them; the batch step, which carries
// none, says nothing.
func TestGymOwnCollectorEnvNotice(t *testing.T) {
	waitIdle(t)
	out := filepath.Join(jobsDir, "gymenv-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	script := writeScript(t, filepath.Base(out)+".sh", fmt.Sprintf(`
echo batch-step
env NEMO_GYM_OTEL_RUN_ID=gymjob OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 srun -N1 -n1 printenv OTEL_EXPORTER_OTLP_ENDPOINT > %s.step
`, out))
	r := asUser(t, 120*time.Second, tokenEnv(), "sbatch --wait --gym-otel -o "+out+".out "+script)
	if r.code != 0 {
		t.Fatalf("sbatch: %d %s", r.code, r.stderr)
	}
	id := jobIDOf(t, r)
	data, _ := os.ReadFile(out + ".out")
	want := "gym-otel: warning: job " + id + ": NEMO_GYM_OTEL_RUN_ID, OTEL_EXPORTER_OTLP_ENDPOINT already set for this step, kept, so they win over this job's collector"
	if n := strings.Count(string(data), want); n != 1 {
		t.Errorf("the notice appears %d times, want once:\n%s", n, data)
	}
	if n := strings.Count(string(data), "gym-otel: warning"); n != 1 {
		t.Errorf("%d gym-otel warnings in the job's output, want 1:\n%s", n, data)
	}
	step, _ := os.ReadFile(out + ".step")
	if strings.TrimSpace(string(step)) != "http://localhost:4318" {
		t.Errorf("the step's own value did not win: %q", step)
	}
	waitNoCollector(t)
	waitIdle(t)
}

// writeChainConfig writes <base>.gym.yaml, a Gym config of one vLLM
// service on port serving model and a resumable benchmark b1 (the shape
// Gym's auto-resume chains run), with its output under <base>.run. It
// returns the config's path and that run dir.
func writeChainConfig(t *testing.T, base, port, model string) (cfg, runDir string) {
	t.Helper()
	runDir = base + ".run"
	cfg = base + ".gym.yaml"
	if err := os.WriteFile(cfg, []byte(`services:
  policy: {type: vllm, container: c, model: m, port: `+port+`, served_model_name: `+model+`}
compute:
  gymtest: {type: slurm, account: a}
driver:
  gym_install: {ref: v0}
  benchmarks:
    b1: {resumable: true}
job:
  output_path: `+runDir+`
`), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg, runDir
}
