package plugin_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/slurmkit"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestStepOnlyFlagged: the step-only design (gym_otel_step.so, no job
// prolog or epilog callback) on real Slurm with PrologFlags=Alloc,Contain.
// The installed .so exports neither job callback; a --gym-otel batch job
// gets its collector from its batch step (the first step on the node):
// the collector is ready (slurmd's log) and its OTLP port answers before
// the script's first line; a second step finds it through root's record;
// the Gym stand-in's spans are in the job's traces.jsonl; the extern
// step's exit drains it: no supervisor or collector, no record dir and no
// start files after the job; and an unflagged job still runs.
func TestStepOnlyFlagged(t *testing.T) {
	if err := slurmkit.Install(root, plugDir, "build/gym_otel_step.so"); err != nil {
		t.Fatalf("%v (make build)", err)
	}
	if out, err := exec.Command("nm", "-D", "--defined-only", filepath.Join(plugDir, "gym_otel_step.so")).CombinedOutput(); err != nil {
		t.Fatalf("nm: %v %s", err, out)
	} else if strings.Contains(string(out), "slurm_spank_job_prolog") || strings.Contains(string(out), "slurm_spank_job_epilog") {
		t.Fatalf("gym_otel_step.so exports a job prolog/epilog callback:\n%s", out)
	}
	stepConf := strings.Replace(goodConf, "/gym_otel.so ", "/gym_otel_step.so ", 1)
	if stepConf == goodConf {
		t.Fatalf("no gym_otel.so in %q", goodConf)
	}
	if err := os.WriteFile(clusterConf, []byte(stepConf), 0o644); err != nil {
		t.Fatal(err)
	}
	withCluster(t, "--prolog-flags", "Alloc,Contain")
	// Runs before withCluster's cleanup brings the default back up.
	t.Cleanup(func() {
		if err := os.WriteFile(clusterConf, []byte(goodConf), 0o644); err != nil {
			t.Error(err)
		}
	})
	waitIdle(t)
	gym := testenv.Standin(t, "gym-standin")
	if out, err := run("install", "-m", "0755", gym, filepath.Join(plugDir, "gym-standin")); err != nil {
		t.Fatalf("install %s: %v %s", gym, err, out)
	}
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	base := filepath.Join(jobsDir, "steponly-"+tag)
	jobDir := base + ".run"
	script := writeScript(t, "steponly-"+tag+".sh", fmt.Sprintf(`
date -u +%%Y-%%m-%%dT%%H:%%M:%%S.%%NZ > %[1]s.first
port=${OTEL_EXPORTER_OTLP_ENDPOINT##*:}
if (exec 3<>/dev/tcp/127.0.0.1/${port:-1}) 2>/dev/null; then echo up > %[1]s.port; else echo "down ${OTEL_EXPORTER_OTLP_ENDPOINT:-unset}" > %[1]s.port; fi
env > %[1]s.batch.env
srun -N1 bash -c 'env > %[1]s.step.env'
%[2]s/gym-standin --rollouts 3 || exit 9
exit 5
`, base, plugDir))
	start := time.Now()
	r := asUser(t, 180*time.Second, tokenEnv(), fmt.Sprintf("sbatch -N1 --wait --gym-otel=job_dir=%s,run_id=step-%%j -o %s.out %s", jobDir, base, script))
	if r.code != 5 {
		out, _ := os.ReadFile(base + ".out")
		t.Fatalf("exit %d (want 5); stderr %s\n%s", r.code, r.stderr, out)
	}
	jobID := jobIDOf(t, r)
	t.Logf("job %s: sbatch --wait took %v", jobID, time.Since(start).Round(time.Millisecond))
	if p, _ := os.ReadFile(base + ".port"); strings.TrimSpace(string(p)) != "up" {
		t.Errorf("the collector's OTLP port at the script's first line: %q", p)
	}
	first := testenv.ReadTime(t, base+".first")
	// The batch step's slurmstepd logs the starter's lines ("[N.batch] ").
	log := slurmdLogs(t)
	m := regexp.MustCompile(`\[([0-9T:.-]+)\] (?:\[` + jobID + `\.batch\] )?gym-otel: job ` + jobID + `: collector ready on gn1`).FindStringSubmatch(log)
	if m == nil {
		t.Errorf("no ready line for job %s in slurmd logs", jobID)
	} else if ready, err := time.ParseInLocation("2006-01-02T15:04:05.000", m[1], time.Local); err != nil {
		t.Error(err)
	} else {
		t.Logf("collector ready %v before the script's first line", first.Sub(ready).Round(time.Millisecond))
		if !ready.Before(first) {
			t.Errorf("collector ready at %v, script's first line at %v", ready, first)
		}
	}
	for _, f := range []string{".batch.env", ".step.env"} {
		data, err := os.ReadFile(base + f)
		if err != nil {
			t.Error(err)
			continue
		}
		if strings.Contains(string(data), backendToken) {
			t.Errorf("%s: the backend token is in the task env", f)
		}
		env := testenv.EnvOf(string(data))
		if env["NEMO_GYM_OTEL_RUN_ID"] != "step-"+jobID || !strings.HasPrefix(env["OTEL_EXPORTER_OTLP_ENDPOINT"], "http://127.0.0.1:") {
			t.Errorf("%s: run id %q, endpoint %q", f, env["NEMO_GYM_OTEL_RUN_ID"], env["OTEL_EXPORTER_OTLP_ENDPOINT"])
		}
	}
	waitNoCollector(t)
	waitIdle(t)
	traces, _ := os.ReadFile(filepath.Join(jobDir, "otel", "traces.jsonl"))
	if !strings.Contains(string(traces), "gym.rollout") {
		t.Errorf("no gym.rollout span in the job's traces.jsonl (%d bytes)", len(traces))
	}
	if rc, err := os.ReadFile(filepath.Join(jobDir, "otel", "receipt.json")); err != nil {
		t.Errorf("no receipt (the extern step's drain did not run?): %v", err)
	} else {
		t.Logf("receipt: %d bytes", len(rc))
	}
	if ents, _ := filepath.Glob(filepath.Join(recordDir, "*", jobID)); len(ents) > 0 {
		t.Errorf("record dirs left: %v", ents)
	}
	if ents, _ := filepath.Glob(filepath.Join(recordDir, "*", ".start-"+jobID+".*")); len(ents) > 0 {
		t.Errorf("start files left: %v", ents)
	}
	// An unflagged job under the same plugin runs and gets nothing.
	plain := writeScript(t, "steponly-plain-"+tag+".sh", "env > "+base+".plain.env\n")
	if r := asUser(t, 60*time.Second, nil, fmt.Sprintf("sbatch -N1 --wait -o /dev/null %s", plain)); r.code != 0 {
		t.Fatalf("unflagged job: exit %d: %s", r.code, r.stderr)
	}
	if data, _ := os.ReadFile(base + ".plain.env"); strings.Contains(string(data), "OTEL_EXPORTER_OTLP_ENDPOINT") {
		t.Errorf("an unflagged job's task env has the collector's endpoint")
	}
}
