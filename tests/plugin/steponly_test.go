package plugin_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
	withClusterConf(t, stepConf, "--prolog-flags", "Alloc,Contain")
	base, script := stepsScript(t, "steponly")
	tag := strings.TrimPrefix(filepath.Base(base), "steponly-")
	jobDir := base + ".run"
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
	checkStepsJob(t, base, jobDir, "step-"+jobID)
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

// TestStepOnlyStartTime compares the two designs' start of a flagged
// one-node job on gn1 (PrologFlags=Alloc,Contain for both): from
// slurmctld's allocation ("sched: Allocate JobId=N", ms stamps) to the
// batch script's first line, and to `sbatch --wait`'s return with no
// supervisor or collector left (sbatch --wait polls in seconds: coarse), in
// GYM_OTEL_STEPONLY_ROUNDS rounds (skipped when unset) of one job per
// design, gym_otel_step.so first, slurmd restarted between designs. Each
// job must get its collector (the endpoint in the script's env). It
// prints the medians and ranges; it asserts no speed.
func TestStepOnlyStartTime(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("GYM_OTEL_STEPONLY_ROUNDS"))
	if rounds <= 0 {
		t.Skip("a measurement: set GYM_OTEL_STEPONLY_ROUNDS=N")
	}
	if err := slurmkit.Install(root, plugDir, "build/gym_otel_step.so"); err != nil {
		t.Fatalf("%v (make build)", err)
	}
	stepConf := strings.Replace(goodConf, "/gym_otel.so ", "/gym_otel_step.so ", 1)
	t.Cleanup(func() {
		if err := os.WriteFile(clusterConf, []byte(goodConf), 0o644); err != nil {
			t.Error(err)
		}
		if err := upCluster(); err != nil {
			t.Error(err)
		}
	})
	d := markerDir(t, "steponlytime")
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf("date +%%s%%N > %[1]s/first.$SLURM_JOB_ID\nenv > %[1]s/env.$SLURM_JOB_ID\n", d))
	alloc := regexp.MustCompile(`^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})\] sched: Allocate JobId=(\d+) `)
	allocOf := func(job string) time.Time {
		data, _ := os.ReadFile(filepath.Join(stateDir, "slurmctld.log"))
		for _, l := range strings.Split(string(data), "\n") {
			if m := alloc.FindStringSubmatch(l); m != nil && m[2] == job {
				at, _ := time.ParseInLocation("2006-01-02T15:04:05.000", m[1], time.Local)
				return at
			}
		}
		return time.Time{}
	}
	first := map[string][]float64{}
	end := map[string][]float64{}
	for r := 0; r < rounds; r++ {
		for _, design := range []struct{ name, conf string }{{"step-only", stepConf}, {"default", goodConf}} {
			if err := os.WriteFile(clusterConf, []byte(design.conf), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := upCluster("--prolog-flags", "Alloc,Contain"); err != nil {
				t.Fatal(err)
			}
			if _, err := run(filepath.Join(root, "tests/slurm/restart-slurmd.sh")); err != nil {
				t.Fatal(err)
			}
			waitIdle(t)
			res := asUser(t, 120*time.Second, tokenEnv(), fmt.Sprintf("sbatch --wait -w gn1 --gym-otel=job_dir=%s/run%d-%s -o /dev/null %s", d, r, design.name, script))
			if res.code != 0 {
				t.Fatalf("%s job: exit %d: %s", design.name, res.code, res.stderr)
			}
			job := jobIDOf(t, res)
			waitNoCollector(t)
			done := time.Now()
			env, _ := os.ReadFile(filepath.Join(d, "env."+job))
			if !strings.Contains(string(env), "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:") {
				t.Fatalf("%s job %s: no collector endpoint in the script's env", design.name, job)
			}
			at := allocOf(job)
			b, err := os.ReadFile(filepath.Join(d, "first."+job))
			if at.IsZero() || err != nil {
				t.Fatalf("%s job %s: allocation %v, first line: %v", design.name, job, at, err)
			}
			ns, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			first[design.name] = append(first[design.name], float64(time.Unix(0, ns).Sub(at).Milliseconds()))
			end[design.name] = append(end[design.name], float64(done.Sub(at).Milliseconds()))
		}
	}
	for _, name := range []string{"step-only", "default"} {
		f, e := slices.Clone(first[name]), slices.Clone(end[name])
		slices.Sort(f)
		slices.Sort(e)
		t.Logf("%s: allocation to the first line %.0f ms median (%.0f-%.0f), to sbatch --wait's return with nothing left %.0f ms (%.0f-%.0f), %d jobs",
			name, f[len(f)/2], f[0], f[len(f)-1], e[len(e)/2], e[0], e[len(e)-1], len(f))
	}
}
