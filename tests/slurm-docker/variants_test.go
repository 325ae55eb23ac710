package slurmdocker

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// The slurm.conf variants besides alloc (lib.sh gen_slurm_conf), per suite;
// contain+wait_step is contain with collector_wait=step on the plugstack
// line of every node.
var variants = map[string][]string{
	"bookworm": {"none", "contain", "contain+wait_step"},
	"trixie":   {"contain", "contain+wait_step", "contain_spank", "runinjob"},
	"sid":      {"contain", "contain+wait_step", "contain_spank", "runinjob"},
}

// snippetPath is where make install puts the plugstack line on each node.
const snippetPath = "/etc/slurm/plugstack.conf.d/gym-otel.conf"

// A short smoke job on every other variant of the suite's Slurm; the
// cluster goes back to alloc afterwards.
func TestVariants(t *testing.T) {
	c := need(t)
	t.Cleanup(func() { c.switchVariant(t, "alloc") })
	for _, v := range variants[c.suite] {
		t.Run(v, func(t *testing.T) {
			conf, waitStep := strings.CutSuffix(v, "+wait_step")
			c.switchVariant(t, conf)
			if waitStep {
				useWaitStep(t, c)
				smokeWaitStep(t, c)
				return
			}
			switch v {
			case "none":
				smokeNoAlloc(t, c)
			case "runinjob":
				smokeRunInJob(t, c)
			default:
				smokeFull(t, c)
			}
		})
	}
}

// smoke is a two-node job: env of the batch step and of an srun -N2 step,
// a Gym stand-in on the batch node.
type smoke struct {
	host, dir, jobID, state, exit string
	env                           map[string]map[string]string // batch, c1, c2
}

func runSmoke(t *testing.T, c *cluster, name string) smoke {
	t.Helper()
	c.waitIdle(t, 60*time.Second)
	host, dir := c.jobDir(t, name)
	writeFile(t, filepath.Join(host, "job.sh"), fmt.Sprintf(`#!/bin/bash
env > %[1]s/env.batch
srun -N2 --ntasks-per-node=1 --overlap bash -c 'env > %[1]s/env.$SLURMD_NODENAME' || exit 91
%[2]s/gym-standin --rollouts 2 --sandbox-provider docker || exit 92
`, dir, standins), 0o755)
	s := smoke{host: host, dir: dir}
	s.jobID = c.sbatch(t, c.tokenEnv(), dir, fmt.Sprintf("-N2 --gym-otel=job_dir=%s -o %s/slurm-%%j.out job.sh", dir, dir))
	s.state, s.exit = c.waitJob(t, s.jobID, 120*time.Second)
	out, _ := os.ReadFile(filepath.Join(host, "slurm-"+s.jobID+".out"))
	t.Logf("%s job %s: %s %s; output:\n%s", c.variant, s.jobID, s.state, s.exit, out)
	if s.state != "COMPLETED" || s.exit != "0:0" {
		t.Fatalf("job %s: %s ExitCode=%s, want COMPLETED 0:0", s.jobID, s.state, s.exit)
	}
	s.env = map[string]map[string]string{}
	for _, k := range []string{"batch", "c1", "c2"} {
		data, err := os.ReadFile(filepath.Join(host, "env."+k))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), c.token) {
			t.Errorf("env.%s: the token's value is in the task env", k)
		}
		s.env[k] = testenv.EnvOf(string(data))
	}
	return s
}

func statePort(t *testing.T, dir string) string {
	t.Helper()
	st, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`"otlp_http": (\d+)`).FindSubmatch(st)
	if m == nil {
		t.Fatalf("%s/state.json: no otlp_http port: %s", dir, st)
	}
	if !strings.Contains(string(st), `"drained"`) {
		t.Errorf("%s/state.json: not drained: %s", dir, st)
	}
	return string(m[1])
}

// smokeFull: the lifecycle works as with alloc: a collector per node, each
// node's tasks pointing at it, the Gym spans in the files, the final
// scrape wait, nothing left.
func smokeFull(t *testing.T, c *cluster) {
	s := runSmoke(t, c, "smoke-"+c.variant)
	dirs := map[string]string{"c1": filepath.Join(s.host, "otel"), "c2": filepath.Join(s.host, "otel", "nodes", "c2")}
	for k, n := range map[string]string{"batch": "c1", "c1": "c1", "c2": "c2"} {
		want := "http://127.0.0.1:" + statePort(t, dirs[n])
		if got := s.env[k]["OTEL_EXPORTER_OTLP_ENDPOINT"]; got != want {
			t.Errorf("env.%s: OTEL_EXPORTER_OTLP_ENDPOINT=%q, want %s (%s's collector)", k, got, want, n)
		}
		for _, v := range gymVars {
			if s.env[k][v] == "" {
				t.Errorf("env.%s: %s missing", k, v)
			}
		}
	}
	spans := find(readOTLP(t, filepath.Join(dirs["c1"], "traces.jsonl")), func(it item) bool {
		return it.signal == "span" && it.name == "gym.rollout" && it.res["slurm_job_id"] == s.jobID && it.res["host.name"] == "c1"
	})
	if len(spans) != 2 {
		t.Errorf("c1: %d gym.rollout spans of job %s, want 2", len(spans), s.jobID)
	}
	if !strings.Contains(c.slurmdLog(t, "c1"), "gym-otel: job "+s.jobID+": batch script done, waiting") {
		t.Errorf("c1: no final-scrape wait for job %s", s.jobID)
	}
	c.waitNothingLeft(t, s.jobID)
	c.waitIdle(t, 30*time.Second)
}

// useWaitStep appends collector_wait=step to the plugstack line on every
// node and restarts the daemons (24.11 and later hand slurmstepd the
// plugstack.conf slurmd read at its start), and undoes both at the end of
// the test.
func useWaitStep(t *testing.T, c *cluster) {
	t.Helper()
	nodes := []string{"ctl", "c1", "c2"}
	edit := func(expr string) error {
		for _, n := range nodes {
			if out, err := c.on(n, "sed", "-i", expr, snippetPath); err != nil {
				return fmt.Errorf("%s: %v %s", n, err, out)
			}
		}
		if out, err := run(filepath.Join(here, "variant.sh"), c.suite, c.variant); err != nil {
			return fmt.Errorf("variant.sh %s %s: %v\n%s", c.suite, c.variant, err, out)
		}
		c.waitIdle(t, 60*time.Second)
		return nil
	}
	if err := edit("s/^required .*/& collector_wait=step/"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := edit("s/ collector_wait=step$//"); err != nil {
			t.Error(err)
		}
	})
}

// smokeWaitStep: with collector_wait=step the smoke job runs as under
// smokeFull, and on each node slurmd logs the prolog's handoff (its last
// line) before the collector's ready line: the prolog handed the start on and Slurm
// launched the steps meanwhile, which waited for it (their env points at
// each node's collector).
func smokeWaitStep(t *testing.T, c *cluster) {
	s := runSmoke(t, c, "smoke-wait-step")
	dirs := map[string]string{"c1": filepath.Join(s.host, "otel"), "c2": filepath.Join(s.host, "otel", "nodes", "c2")}
	for k, n := range map[string]string{"batch": "c1", "c1": "c1", "c2": "c2"} {
		want := "http://127.0.0.1:" + statePort(t, dirs[n])
		if got := s.env[k]["OTEL_EXPORTER_OTLP_ENDPOINT"]; got != want {
			t.Errorf("env.%s: OTEL_EXPORTER_OTLP_ENDPOINT=%q, want %s (%s's collector)", k, got, want, n)
		}
	}
	spans := find(readOTLP(t, filepath.Join(dirs["c1"], "traces.jsonl")), func(it item) bool {
		return it.signal == "span" && it.name == "gym.rollout" && it.res["slurm_job_id"] == s.jobID
	})
	if len(spans) != 2 {
		t.Errorf("c1: %d gym.rollout spans of job %s, want 2", len(spans), s.jobID)
	}
	for _, n := range []string{"c1", "c2"} {
		log := c.slurmdLog(t, n)
		// The prolog's last line before it returns (a node's first
		// "Finished wait for job N's prolog" comes with its first step).
		end, ok1 := logTime(log, `debug:  gym-otel: job `+s.jobID+`: prolog: the collector's start goes on in a child \(collector_wait=step\)`)
		ready, ok2 := logTime(log, `gym-otel: job `+s.jobID+`: collector ready on `+n)
		if !ok1 || !ok2 {
			t.Errorf("%s: slurmd's log lacks job %s's prolog end (%v) or its ready line (%v)", n, s.jobID, ok1, ok2)
			continue
		}
		t.Logf("%s: the prolog ended %v before the collector was ready", n, ready.Sub(end))
		if !end.Before(ready) {
			t.Errorf("%s: the prolog ended at %v, not before the collector was ready (%v)", n, end, ready)
		}
	}
	c.waitNothingLeft(t, s.jobID)
	for _, n := range []string{"c1", "c2"} {
		if out, _ := c.on(n, "sh", "-c", "ls -a /run/gym-otel/*/ 2>/dev/null | grep -F .start-"+s.jobID+".lock"); strings.TrimSpace(out) != "" {
			t.Errorf("%s: start lock left: %s", n, out)
		}
	}
	c.waitIdle(t, 30*time.Second)
}

// smokeNoAlloc (PrologFlags unset): slurmd would run the job prolog on a
// node only at the node's first step, with that srun's job-control env,
// which holds no spec, so only the batch host could get a collector. The
// plugin refuses --gym-otel at submit naming PrologFlags=Alloc; jobs
// without the flag run as before; nothing drains.
func smokeNoAlloc(t *testing.T, c *cluster) {
	smokeRefused(t, c, "smoke-none", "gym-otel: PrologFlags=Alloc is not set in slurm.conf")
}

// smokeRefused: every submit command with --gym-otel exits non-zero with
// want on stderr and queues nothing; a two-node job without the flag runs.
func smokeRefused(t *testing.T, c *cluster, name, want string) {
	c.waitIdle(t, 60*time.Second)
	_, dir := c.jobDir(t, name)
	for _, cmd := range []string{"sbatch -N2 --gym-otel --wrap true", "srun -N1 --gym-otel true", "salloc -N1 --gym-otel true"} {
		r := c.asUser(t, 60*time.Second, c.tokenEnv(), dir, cmd)
		if r.code == 0 || !strings.Contains(r.stderr, want) {
			t.Errorf("%s under %s: exit %d, stderr %s", cmd, c.variant, r.code, r.stderr)
		}
	}
	if q, _ := c.on("ctl", "squeue", "-h"); strings.TrimSpace(q) != "" {
		t.Errorf("something was queued: %s", q)
	}
	id := c.sbatch(t, nil, dir, "-N2 -o /dev/null --wrap 'srun -N2 true'")
	if st, ex := c.waitJob(t, id, 60*time.Second); st != "COMPLETED" || ex != "0:0" {
		t.Errorf("a job without the flag under %s: %s %s", c.variant, st, ex)
	}
	c.waitNothingLeft(t, id)
	c.waitIdle(t, 30*time.Second)
}

// smokeRunInJob: Slurm 24.11+ runs no SPANK job prolog under RunInJob, so
// --gym-otel is refused at submit with the reason; jobs without the flag
// run as before.
func smokeRunInJob(t *testing.T, c *cluster) {
	smokeRefused(t, c, "smoke-runinjob", "gym-otel: PrologFlags=RunInJob is set in slurm.conf")
}
