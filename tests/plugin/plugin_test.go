package plugin_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// With the flag, a bad configuration makes sbatch exit non-zero before
// anything is submitted, naming the key; no node drains.
func TestSubmitRefusesBadConfig(t *testing.T) {
	waitIdle(t)
	script := writeScript(t, "bad.sh", "true\n")
	cases := []struct {
		name, env, flag, want string
	}{
		{"no token", "", "--gym-otel", "otel.token_env"},
		{"unknown SPEC item", "OTEL_TOKEN=x", "--gym-otel=scrape_intervall_seconds=3", "scrape_intervall_seconds"},
		{"bad value", "OTEL_TOKEN=x", "--gym-otel=scrape_interval_seconds=0", "otel.scrape_interval_seconds"},
		{"bad endpoint", "OTEL_TOKEN=x", "--gym-otel=endpoint=ftp://x", "otel.endpoint"},
		{"missing gym config", "OTEL_TOKEN=x", "--gym-otel=config=/nonexistent.yaml", "/nonexistent.yaml"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := asUser(t, 30*time.Second, strings.Fields(c.env), "sbatch "+c.flag+" "+script)
			if r.code == 0 {
				t.Fatalf("sbatch succeeded: %s", r.stdout)
			}
			if !strings.Contains(r.stderr, "gym-otel: ") || !strings.Contains(r.stderr, c.want) {
				t.Fatalf("stderr does not name %q with the gym-otel: prefix:\n%s", c.want, r.stderr)
			}
			if q, _ := run("squeue", "-h"); strings.TrimSpace(q) != "" {
				t.Fatalf("something was queued: %s", q)
			}
		})
	}
	// Several mistakes: every one in the one refusal (an unknown item, a
	// bad endpoint, and the token missing from the environment).
	r := asUser(t, 30*time.Second, nil, "sbatch --gym-otel=scrape_intervall_seconds=3,endpoint=ftp://x "+script)
	for _, want := range []string{`scrape_intervall_seconds=3: unknown item (did you mean "scrape_interval_seconds"?)`, "--gym-otel: otel.endpoint: \"ftp://x\"", "otel.token_env: the variable OTEL_TOKEN"} {
		if r.code == 0 || !strings.Contains(r.stderr, want) {
			t.Errorf("sbatch with three mistakes: code %d, stderr lacks %q:\n%s", r.code, want, r.stderr)
		}
	}
	// srun and salloc refuse too.
	r = asUser(t, 30*time.Second, nil, "srun --gym-otel true")
	if r.code == 0 || !strings.Contains(r.stderr, "otel.token_env") {
		t.Fatalf("srun --gym-otel without token: code %d, stderr %s", r.code, r.stderr)
	}
	r = asUser(t, 30*time.Second, nil, "salloc --gym-otel true")
	if r.code == 0 || !strings.Contains(r.stderr, "otel.token_env") {
		t.Fatalf("salloc --gym-otel without token: code %d, stderr %s", r.code, r.stderr)
	}
	waitIdle(t)
}

// A bad plugstack argument fails the submit, naming the argument.
func TestSubmitRefusesBadPlugstackArgument(t *testing.T) {
	waitIdle(t)
	script := writeScript(t, "badarg.sh", "true\n")
	base := strings.TrimSpace(goodConf)
	t.Run("unknown otel key", func(t *testing.T) {
		withSnippet(t, base+" scrape_intervall=3\n")
		r := asUser(t, 30*time.Second, tokenEnv(), "sbatch --gym-otel "+script)
		if r.code == 0 || !strings.Contains(r.stderr, "scrape_intervall") {
			t.Fatalf("code %d, stderr %s", r.code, r.stderr)
		}
	})
	t.Run("malformed", func(t *testing.T) {
		withSnippet(t, base+" Bogus\n")
		for _, flag := range []string{"--gym-otel", ""} {
			r := asUser(t, 30*time.Second, tokenEnv(), "sbatch "+flag+" "+script)
			if r.code == 0 || !strings.Contains(r.stderr, `gym-otel: plugstack.conf argument "Bogus"`) {
				t.Fatalf("sbatch %s: code %d, stderr %s", flag, r.code, r.stderr)
			}
		}
	})
	t.Run("bad prolog_timeout", func(t *testing.T) {
		withSnippet(t, base+" prolog_timeout=-1\n")
		r := asUser(t, 30*time.Second, tokenEnv(), "sbatch --gym-otel "+script)
		if r.code == 0 || !strings.Contains(r.stderr, "prolog_timeout") {
			t.Fatalf("code %d, stderr %s", r.code, r.stderr)
		}
	})
	if q, _ := run("squeue", "-h"); strings.TrimSpace(q) != "" {
		t.Fatalf("something was queued: %s", q)
	}
	waitIdle(t)
}

var gymVars = []string{
	"NEMO_GYM_OTEL_ENABLED", "NEMO_GYM_OTEL_RUN_ID", "NEMO_GYM_OTEL_SPAN_GROUPS",
	"NEMO_GYM_OTEL_LOGS_ENABLED", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
	"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL",
}

// The happy path on two nodes: env in the batch step and in an srun -N2
// inside it, each task pointing at its own node's collector; the token in
// no task env; the exit code kept; nothing left after the job; nodes idle.
func TestSbatchTwoNodes(t *testing.T) {
	waitIdle(t)
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	out := filepath.Join(jobsDir, "two-"+tag)
	script := writeScript(t, "two-"+tag+".sh", fmt.Sprintf(`
env > %[1]s.batch.env
srun -N2 --ntasks-per-node=1 bash -c 'env > %[1]s.step.$SLURMD_NODENAME.env'
# a nested srun with the flag given again must not submit or refuse
srun -N1 --gym-otel true || exit 9
exit 7
`, out))
	jobDir := filepath.Join(jobsDir, "otel-two-"+tag)
	r := asUser(t, 120*time.Second, tokenEnv(), fmt.Sprintf("sbatch -N2 --wait --gym-otel=job_dir=%s,run_id=run-%%j -o %s.out %s", jobDir, out, script))
	if r.code != 7 {
		data, _ := os.ReadFile(out + ".out")
		t.Fatalf("sbatch --wait: exit %d (want the script's 7); stderr %s; job output:\n%s", r.code, r.stderr, data)
	}
	jobID := regexp.MustCompile(`Submitted batch job (\d+)`).FindStringSubmatch(r.stdout)
	if jobID == nil {
		t.Fatalf("no job id in %q", r.stdout)
	}
	read := func(p string) map[string]string {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), backendToken) {
			t.Errorf("%s: the backend token is in the task env", p)
		}
		return testenv.EnvOf(string(data))
	}
	batch := read(out + ".batch.env")
	gn1, gn2 := read(out+".step.gn1.env"), read(out+".step.gn2.env")
	for name, env := range map[string]map[string]string{"batch": batch, "gn1": gn1, "gn2": gn2} {
		for _, k := range gymVars {
			if env[k] == "" {
				t.Errorf("%s: %s missing", name, k)
			}
		}
		if env["NEMO_GYM_OTEL_RUN_ID"] != "run-"+jobID[1] {
			t.Errorf("%s: NEMO_GYM_OTEL_RUN_ID=%q", name, env["NEMO_GYM_OTEL_RUN_ID"])
		}
		if env["GYM_OTEL_JOB"] != jobID[1] {
			t.Errorf("%s: GYM_OTEL_JOB=%q", name, env["GYM_OTEL_JOB"])
		}
		for _, k := range []string{"OTEL_TOKEN", "GYM_OTEL_TOKEN", "SPANK_GYM_OTEL_TOKEN", "SLURM_SPANK_GYM_OTEL_TOKEN"} {
			if _, ok := env[k]; ok {
				t.Errorf("%s: %s is in the task env", name, k)
			}
		}
		if !strings.HasPrefix(env["OTEL_EXPORTER_OTLP_ENDPOINT"], "http://127.0.0.1:") {
			t.Errorf("%s: endpoint %q", name, env["OTEL_EXPORTER_OTLP_ENDPOINT"])
		}
	}
	if gn1["OTEL_EXPORTER_OTLP_ENDPOINT"] == gn2["OTEL_EXPORTER_OTLP_ENDPOINT"] {
		t.Errorf("both nodes' tasks point at one collector: %s", gn1["OTEL_EXPORTER_OTLP_ENDPOINT"])
	}
	if batch["OTEL_EXPORTER_OTLP_ENDPOINT"] != gn1["OTEL_EXPORTER_OTLP_ENDPOINT"] {
		t.Errorf("batch step (gn1) %s, step on gn1 %s", batch["OTEL_EXPORTER_OTLP_ENDPOINT"], gn1["OTEL_EXPORTER_OTLP_ENDPOINT"])
	}
	for _, p := range []string{"otel/collector.yaml", "otel/metrics.jsonl", "otel/nodes/gn2/collector.yaml"} {
		if _, err := os.Stat(filepath.Join(jobDir, p)); err != nil {
			t.Errorf("collector output: %v", err)
		}
	}
	// Each node's collector is the one its supervisor's process exec'd
	// at its start (launch.EnvEarlyCollector), handed the run.
	for _, p := range []string{"otel/supervisor.log", "otel/nodes/gn2/supervisor.log"} {
		if log, _ := os.ReadFile(filepath.Join(jobDir, p)); !strings.Contains(string(log), "the collector exec'd at the supervisor's start took its run") {
			t.Errorf("%s: the early collector did not take the run:\n%s", p, log)
		}
	}
	waitNoCollector(t)
	// The epilog removes the record last, after the collector's group
	// and rules: look once the nodes are idle (their epilogs done).
	waitIdle(t)
	if ents, _ := filepath.Glob(filepath.Join(recordDir, "*", jobID[1])); len(ents) > 0 {
		t.Errorf("record dirs left: %v", ents)
	}
}

// A value the user set wins over the plugin's.
func TestUserValueWins(t *testing.T) {
	waitIdle(t)
	out := filepath.Join(jobsDir, "userwins")
	script := writeScript(t, "userwins.sh", fmt.Sprintf("env > %s.batch.env\nsrun -N1 env > %s.step.env\n", out, out))
	env := append(tokenEnv(), "OTEL_EXPORTER_OTLP_ENDPOINT=http://10.9.9.9:4318")
	r := asUser(t, 120*time.Second, env, "sbatch --wait --gym-otel -o /dev/null "+script)
	if r.code != 0 {
		t.Fatalf("sbatch: %d %s", r.code, r.stderr)
	}
	for _, p := range []string{out + ".batch.env", out + ".step.env"} {
		data, _ := os.ReadFile(p)
		e := testenv.EnvOf(string(data))
		if e["OTEL_EXPORTER_OTLP_ENDPOINT"] != "http://10.9.9.9:4318" {
			t.Errorf("%s: OTEL_EXPORTER_OTLP_ENDPOINT=%q, want the user's", p, e["OTEL_EXPORTER_OTLP_ENDPOINT"])
		}
		if e["NEMO_GYM_OTEL_ENABLED"] != "1" {
			t.Errorf("%s: NEMO_GYM_OTEL_ENABLED=%q", p, e["NEMO_GYM_OTEL_ENABLED"])
		}
	}
	waitNoCollector(t)
	waitIdle(t)
}

// salloc --gym-otel: its sruns get the env and do not submit again; an srun
// --gym-otel inside an allocation made without the flag is refused.
func TestSallocAndNestedSrun(t *testing.T) {
	waitIdle(t)
	r := asUser(t, 60*time.Second, tokenEnv(), "salloc -N1 --gym-otel srun -N1 --gym-otel printenv OTEL_EXPORTER_OTLP_ENDPOINT")
	if r.code != 0 || !strings.HasPrefix(strings.TrimSpace(r.stdout), "http://127.0.0.1:") {
		t.Fatalf("salloc --gym-otel srun: code %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	r = asUser(t, 60*time.Second, tokenEnv(), "salloc -N1 srun -N1 --gym-otel true")
	if r.code == 0 || !strings.Contains(r.stderr, "gym-otel: --gym-otel must be given to the allocation") {
		t.Fatalf("srun --gym-otel in an unflagged allocation: code %d, stderr %s", r.code, r.stderr)
	}
	r = asUser(t, 60*time.Second, tokenEnv(), "srun -N2 --gym-otel printenv OTEL_EXPORTER_OTLP_ENDPOINT")
	eps := strings.Fields(r.stdout)
	sort.Strings(eps)
	if r.code != 0 || len(eps) != 2 || eps[0] == eps[1] {
		t.Fatalf("srun -N2 --gym-otel: code %d, endpoints %v, stderr %s", r.code, eps, r.stderr)
	}
	waitNoCollector(t)
	waitIdle(t)
}

// The collector cannot start: on_failure=fail fails the job with the reason,
// continue runs it without the env; no node drains.
func TestCollectorFailure(t *testing.T) {
	waitIdle(t)
	out := filepath.Join(jobsDir, "fail")
	script := writeScript(t, "fail.sh", fmt.Sprintf("env > %s.env\necho ran\n", out))
	checkCollectorFailure(t, out, script, "")
	waitNoCollector(t)
	waitIdle(t)
}

// checkCollectorFailure submits script (which writes out.env) twice, with
// sbatch's extra arguments and a collector that cannot start
// (binary=/nonexistent/otelcol): under on_failure=fail the job fails,
// its output says why and the script never runs; under continue the job
// runs without the collector's env (GYM_OTEL_JOB set), slurmd's log warns
// and the job's output warns exactly once. It returns the two jobs' ids.
func checkCollectorFailure(t *testing.T, out, script, sbatchArgs string) (failed, continued string) {
	t.Helper()
	os.Remove(out + ".env")
	r := asUser(t, 120*time.Second, tokenEnv(), "sbatch --wait "+sbatchArgs+" --gym-otel=binary=/nonexistent/otelcol,on_failure=fail -o "+out+".out "+script)
	data, _ := os.ReadFile(out + ".out")
	if r.code == 0 {
		t.Fatalf("on_failure=fail: the job succeeded; output %s", data)
	}
	failed = jobIDOf(t, r)
	if _, err := os.Stat(out + ".env"); err == nil {
		t.Errorf("on_failure=fail: the script ran")
	}
	if !strings.Contains(string(data), "gym-otel: ") || !strings.Contains(string(data), "on_failure=fail") {
		t.Errorf("on_failure=fail: the job's output does not say why:\n%s", data)
	}
	waitIdle(t)

	r = asUser(t, 120*time.Second, tokenEnv(), "sbatch --wait "+sbatchArgs+" --gym-otel=binary=/nonexistent/otelcol -o "+out+".out "+script)
	if r.code != 0 {
		t.Fatalf("on_failure=continue: exit %d %s", r.code, r.stderr)
	}
	continued = jobIDOf(t, r)
	env, err := os.ReadFile(out + ".env")
	if err != nil {
		t.Fatal(err)
	}
	if e := testenv.EnvOf(string(env)); e["OTEL_EXPORTER_OTLP_ENDPOINT"] != "" || e["GYM_OTEL_JOB"] == "" {
		t.Errorf("on_failure=continue: endpoint %q, GYM_OTEL_JOB %q", e["OTEL_EXPORTER_OTLP_ENDPOINT"], e["GYM_OTEL_JOB"])
	}
	if !strings.Contains(slurmdLogs(t), "the job runs without telemetry (on_failure=continue)") {
		t.Errorf("no warning in the slurmd log")
	}
	if data, _ := os.ReadFile(out + ".out"); strings.Count(string(data), "gym-otel: warning: no collector") != 1 {
		t.Errorf("on_failure=continue: the job's output does not warn exactly once:\n%s", data)
	}
	return failed, continued
}

// Jobs without the flag never map the Go core: not in sbatch or srun
// (LD_DEBUG=files lists every object they load), not in slurmstepd (its
// maps while the job runs), not in the prolog/epilog (the plugin logs at
// debug level whenever it loads the core there).
func TestNoFlagNoGo(t *testing.T) {
	waitIdle(t)
	for _, c := range []string{"sbatch --wrap true -o /dev/null", "srun true"} {
		r := asUser(t, 60*time.Second, []string{"LD_DEBUG=files"}, c)
		if r.code != 0 {
			t.Fatalf("%s: %d %s", c, r.code, r.stderr)
		}
		if !strings.Contains(r.stderr, "gym_otel.so") {
			t.Fatalf("%s: LD_DEBUG shows no gym_otel.so (is the plugin loaded?)", c)
		}
		if strings.Contains(r.stderr, "gym_otel_core") {
			t.Errorf("%s: loaded the Go core", c)
		}
	}
	// Positive control: with the flag, sbatch does load it.
	r := asUser(t, 60*time.Second, append(tokenEnv(), "LD_DEBUG=files"), "sbatch --gym-otel --wrap true -o /dev/null")
	if r.code != 0 || !strings.Contains(r.stderr, "gym_otel_core") {
		t.Errorf("sbatch --gym-otel: code %d, core loaded: %v", r.code, strings.Contains(r.stderr, "gym_otel_core"))
	}
	waitIdle(t)

	// The batch step and a step run until the test has seen both (at
	// most 10 minutes).
	release := filepath.Join(jobsDir, "noflag-"+strconv.FormatInt(time.Now().UnixNano(), 36)+".release")
	hold := "for i in $(seq 6000); do [ -e " + release + " ] && break; sleep 0.1; done"
	script := writeScript(t, "noflag.sh", "srun -N1 sh -c '"+hold+"' &\n"+hold+"\nwait\n")
	t.Cleanup(func() { os.WriteFile(release, nil, 0o644) })
	r = asUser(t, 30*time.Second, nil, "sbatch -o /dev/null "+script)
	m := regexp.MustCompile(`Submitted batch job (\d+)`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("sbatch: %s %s", r.stdout, r.stderr)
	}
	// seen: each step process of the job, and whether gym_otel.so is
	// mapped in it yet (slurmstepd names itself before it loads its
	// plugins: a process first seen without it is looked at again).
	seen := map[string]bool{}
	allMapped := func() bool {
		for _, ok := range seen {
			if !ok {
				return false
			}
		}
		return true
	}
	coreMapped := map[string]bool{}
	deadline := time.Now().Add(patience)
	for time.Now().Before(deadline) {
		pids, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range pids {
			cl, err := os.ReadFile(p)
			if err != nil || !strings.HasPrefix(string(cl), "slurmstepd: ["+m[1]+".") || !sameMountNS(filepath.Dir(p)) {
				continue
			}
			maps, err := os.ReadFile(filepath.Join(filepath.Dir(p), "maps"))
			if err != nil {
				continue
			}
			name := strings.TrimRight(string(cl), "\x00 ")
			seen[name] = seen[name] || strings.Contains(string(maps), "gym_otel.so")
			if strings.Contains(string(maps), "gym_otel_core") && !coreMapped[name] {
				coreMapped[name] = true
				t.Errorf("%s: the Go core is mapped", name)
			}
		}
		if len(seen) >= 2 && allMapped() {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(seen) < 2 {
		t.Errorf("saw only the step processes %v of job %s", seen, m[1])
	}
	for name, ok := range seen {
		if !ok {
			t.Errorf("%s: gym_otel.so never mapped (plugin not loaded?)", name)
		}
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitIdle(t)
	logs := slurmdLogs(t)
	if strings.Contains(logs, "job "+m[1]+": prolog:") || strings.Contains(logs, "job "+m[1]+": epilog:") {
		t.Errorf("the prolog/epilog of unflagged job %s went to the Go core", m[1])
	}
}

// Prints (does not gate) the time of `srun true` with the plugin installed
// and the flag unused against no plugin at all.

// --export=NONE: the env still reaches the batch step and its sruns; then a
// scancel mid-job: collector drained, its jsonl lines whole, node idle.
func TestExportNoneAndScancel(t *testing.T) {
	waitIdle(t)
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	out := filepath.Join(jobsDir, "cancel-"+tag)
	jobDir := filepath.Join(jobsDir, "otel-cancel-"+tag)
	script := writeScript(t, "cancel-"+tag+".sh", fmt.Sprintf(
		"env > %[1]s.batch.env\nsrun -N1 /usr/bin/env > %[1]s.step.env\ntouch %[1]s.ready\nsleep 120\n", out))
	r := asUser(t, 30*time.Second, tokenEnv(), fmt.Sprintf("sbatch --export=NONE --gym-otel=job_dir=%s -o /dev/null %s", jobDir, script))
	m := regexp.MustCompile(`Submitted batch job (\d+)`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("sbatch: %s %s", r.stdout, r.stderr)
	}
	waitFile(t, 60*time.Second, out+".ready")
	for _, p := range []string{out + ".batch.env", out + ".step.env"} {
		data, _ := os.ReadFile(p)
		e := testenv.EnvOf(string(data))
		if !strings.HasPrefix(e["OTEL_EXPORTER_OTLP_ENDPOINT"], "http://127.0.0.1:") || e["GYM_OTEL_JOB"] != m[1] {
			t.Errorf("%s (--export=NONE): endpoint %q GYM_OTEL_JOB %q", p, e["OTEL_EXPORTER_OTLP_ENDPOINT"], e["GYM_OTEL_JOB"])
		}
	}
	// The collector was ready before the script's first line (the
	// prolog waits for it): the scancel comes while it runs.
	if out, err := run("scancel", m[1]); err != nil {
		t.Fatalf("scancel: %v %s", err, out)
	}
	waitNoCollector(t)
	waitIdle(t)
	jsonlLines(t, filepath.Join(jobDir, "otel"))
	if ents, _ := filepath.Glob(filepath.Join(recordDir, "*", m[1])); len(ents) > 0 {
		t.Errorf("record dirs left: %v", ents)
	}
}

// sameMountNS reports whether the process of /proc/<pid> dir runs in this
// process's mount namespace: a container's slurmstepd of a job with the
// same id is another cluster's.
func sameMountNS(dir string) bool {
	self, err1 := os.Readlink("/proc/self/ns/mnt")
	other, err2 := os.Readlink(filepath.Join(dir, "ns", "mnt"))
	return err1 == nil && err2 == nil && self == other
}
