package plugin_test

// Hostile input, on real Slurm: values and tokens too large for Slurm's
// exec of the job prolog, control characters, a job of root, a collector
// that never becomes healthy and floods its log under a short
// PrologEpilogTimeout, a job named to move a parser, and a controller that
// stops answering during the final-scrape wait. Each must leave every node
// idle (never drained), hang no job, and tell the user what went wrong.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/supervise"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestSubmitBoundsHostileValues: sbatch refuses, naming the key and the
// limit, and submits nothing.
func TestSubmitBoundsHostileValues(t *testing.T) {
	waitIdle(t)
	d := markerDir(t, "bounds")
	script := writeScript(t, filepath.Base(d)+".sh", "echo ran\n")
	bigName := d + "/big.yaml"
	if err := os.WriteFile(bigName, []byte("driver:\n  gym_install: /opt/gym\notel:\n  service_name: "+strings.Repeat("s", 140*1024)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := run("squeue", "-h", "-o", "%i")
	for _, c := range []struct {
		name, spec string
		env        []string
		want       []string
	}{
		{"140 kB service_name", "config=" + bigName, tokenEnv(), []string{"otel.service_name", "143360 bytes, more than the 1024 allowed"}},
		{"20 kB token", "", []string{"OTEL_TOKEN=" + strings.Repeat("k", 20000)}, []string{"otel.token_env: the token in OTEL_TOKEN is 20000 bytes, more than the 16384 allowed"}},
		{"newline in run_id", "run_id=r1$'\\n'status=ready", tokenEnv(), []string{"run_id", `control character '\n'`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			flag := "--gym-otel"
			if c.spec != "" {
				flag += "=" + c.spec
			}
			r := asUser(t, 30*time.Second, c.env, fmt.Sprintf("sbatch %s -o %s.out %s", flag, d, script))
			if r.code == 0 {
				t.Fatalf("submitted: %s", r.stdout)
			}
			for _, w := range c.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			if strings.Contains(r.stderr, "kkkkkkkkkk") {
				t.Error("the error quotes the token")
			}
		})
	}
	// Root's own jobs get no collector.
	cmd := exec.Command("sbatch", "--gym-otel", "-o", d+"/root.out", script)
	cmd.Env = append(os.Environ(), tokenEnv()...)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "jobs of root (uid 0) get no collector") {
		t.Errorf("a job of root was accepted: %v %s", err, out)
	}
	if after, _ := run("squeue", "-h", "-o", "%i"); after != before {
		t.Errorf("something was queued: %q", after)
	}
	waitIdle(t)
}

// TestNeverHealthyUnderShortPrologTimeout: with PrologEpilogTimeout=20 and
// the plugstack's prolog_timeout=30 (too long: the plugin warns and keeps
// 5 s below Slurm's), a collector that never becomes healthy and floods its
// log with escape sequences, and tries to flood the report descriptor, costs
// the job at most the capped wait: the node stays idle, the job runs with a
// one-line, bounded reason.
func TestNeverHealthyUnderShortPrologTimeout(t *testing.T) {
	withCluster(t, "--extra-conf", "PrologEpilogTimeout=20")
	waitIdle(t)
	d := markerDir(t, "stall")
	bin := filepath.Join(d, "stalling-collector")
	body := fmt.Sprintf(`#!/bin/sh
case "$1" in --version) exec %s --version ;; esac
head -c 104857600 /dev/zero >&3 2>/dev/null
for i in $(seq 1 2000); do printf '\033[31mERROR\033[0m %%0500d\r\n' $i; done
printf 'x%%.0s' $(seq 1 200000)
exec sleep 1000
`, testenv.Collector(t))
	if err := os.WriteFile(bin, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	// The warning comes once per node and setting (a marker in root's
	// record dir, which outlives the cluster): an earlier run of this test
	// on the machine must not hide it.
	for _, n := range []string{"gn1", "gn2"} {
		if err := os.Remove(filepath.Join(recordDir, n, ".timeouts-warned")); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	script := writeScript(t, filepath.Base(d)+".sh", "echo ran\n")
	r := asUser(t, 90*time.Second, tokenEnv(), fmt.Sprintf("sbatch --wait --gym-otel=binary=%s,health_check_timeout_seconds=300,job_dir=%s/run -o %s.out %s", bin, d, d, script))
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	out, _ := os.ReadFile(d + ".out")
	if !strings.Contains(string(out), "ran") || !strings.Contains(string(out), "no collector on gn1") {
		t.Errorf("the job did not run with a warning: %s", out)
	}
	waitNoCollector(t)
	waitIdle(t)
	log := slurmdLogs(t)
	jid := jobIDOf(t, r)
	pm := regexp.MustCompile(`\[([0-9T:.-]+)\] (?:debug:  |error: )?gym-otel: job `+jid+`: (prolog: the job carries a spec|no report from the supervisor.*)`).FindAllStringSubmatch(log, -1)
	if len(pm) < 2 {
		t.Fatalf("no prolog start and failure lines for job %s: %v", jid, pm)
	}
	p0, _ := time.ParseInLocation("2006-01-02T15:04:05.000", pm[0][1], time.Local)
	p1, _ := time.ParseInLocation("2006-01-02T15:04:05.000", pm[1][1], time.Local)
	// The plugin's deadline is 15 s (checked below from its warning), its
	// wait for the report that less the kill reserve: it gives up after
	// about 9 s by its own timer. What must hold on any machine is that
	// it gave up before Slurm's PrologEpilogTimeout of 20 s, past which
	// slurmd kills the prolog and drains the node (waitIdle above fails
	// on a drained node).
	t.Logf("the prolog gave up on a never-healthy collector after %s: %s", p1.Sub(p0), pm[1][2])
	if p1.Sub(p0) >= 20*time.Second {
		t.Errorf("the prolog waited %s: not within PrologEpilogTimeout=20", p1.Sub(p0))
	}
	if !strings.Contains(log, "plugstack prolog_timeout=30 is not below Slurm's prolog/epilog timeout (20s) less 5s: the plugin uses 15s") {
		t.Error("no warning about prolog_timeout against PrologEpilogTimeout in slurmd's log")
	}
	m := regexp.MustCompile(`gym-otel: job `+jid+`: (.*)`).FindAllStringSubmatch(log, -1)
	if len(m) == 0 {
		t.Fatal("no log line for the job")
	}
	for _, l := range m {
		if strings.ContainsAny(l[1], "\x1b\r") || len(l[1]) > 1200 {
			t.Errorf("a log line of root's carries the user's text unbounded or with control characters (%d bytes): %q", len(l[1]), l[1][:min(len(l[1]), 200)])
		}
	}
}

// TestJobNameCannotMoveTheParser: a job whose name looks like scontrol's
// fields is not taken for an array task: its job_dir's %A and %a expand to
// its own job id and 0.
func TestJobNameCannotMoveTheParser(t *testing.T) {
	waitIdle(t)
	d := markerDir(t, "name")
	script := writeScript(t, filepath.Base(d)+".sh", "echo ran\n")
	r := asUser(t, 90*time.Second, tokenEnv(), fmt.Sprintf("sbatch --wait -J 'x ArrayJobId=9 ArrayTaskId=9 JobState=COMPLETED' --gym-otel=job_dir=%s/run-%%A-%%a -o %s.out %s", d, d, script))
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	id := jobIDOf(t, r)
	jsonlLines(t, filepath.Join(d, "run-"+id+"-0", "otel"))
	if _, err := os.Stat(filepath.Join(d, "run-9-9")); err == nil {
		t.Error("the job's name was read as its array ids")
	}
	// Root's record dirs, made or fixed by this job's prolog, cannot be
	// listed by the user.
	if r := asUser(t, 10*time.Second, nil, "ls "+recordDir+"/gn1 "+recordDir); r.code == 0 {
		t.Errorf("the user can list root's record dirs: %s", r.stdout)
	}
	waitIdle(t)
}

// TestFinalWaitBoundedWhileControllerHangs: slurmctld stops answering
// (SIGSTOP) while the batch step waits for the final scrape; the wait still
// ends on time, and the job completes once the controller is back.
func TestFinalWaitBoundedWhileControllerHangs(t *testing.T) {
	waitIdle(t)
	d := markerDir(t, "hang")
	// Two nodes, and gn2's peer file removed by the script (as if the job
	// dir were not shared): the batch node's supervisor cannot ask gn2 for
	// its final scrape, so the wait holds its whole bound (hold.c), which
	// is what this test is about; with every node told, it ends early.
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf("rm %s/run/otel/nodes/gn2/%s || exit 7\ntouch %s/last\n", d, supervise.PeerFile, d))
	r := asUser(t, 20*time.Second, tokenEnv(), fmt.Sprintf("sbatch --parsable -N2 --gym-otel=scrape_interval_seconds=10,job_dir=%s/run -o %s.out %s", d, d, script))
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	waitFile(t, 60*time.Second, d+"/last")
	pidText, err := os.ReadFile(filepath.Join(stateDir, "run", "slurmctld.slurm.pid"))
	if err != nil {
		t.Fatal(err)
	}
	ctld, _ := strconv.Atoi(strings.TrimSpace(string(pidText)))
	if err := syscall.Kill(ctld, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = syscall.Kill(ctld, syscall.SIGCONT)
		}
	}()
	re := regexp.MustCompile(`\[([0-9T:.-]+)\] \[` + id + `\.batch\] gym-otel: job ` + id + `: (batch script done|final-scrape wait done after (\d+) ms.*|the job is ending.*)`)
	var lines [][]string
	for deadline := time.Now().Add(patience); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if lines = re.FindAllStringSubmatch(slurmdLogs(t), -1); len(lines) >= 2 {
			break
		}
	}
	_ = syscall.Kill(ctld, syscall.SIGCONT)
	stopped = false
	if len(lines) < 2 {
		t.Fatalf("the final wait did not end while slurmctld was stopped: %v", lines)
	}
	// The wait ended by its own bound of 11 s with the controller's
	// answer still missing: it never blocks on slurmctld. Its length is
	// the plugin's own monotonic measure, at least the bound (it did not
	// end early), and far below Slurm's UnkillableStepTimeout (60 s),
	// which would drain the node.
	t0, _ := time.ParseInLocation("2006-01-02T15:04:05.000", lines[0][1], time.Local)
	t1, _ := time.ParseInLocation("2006-01-02T15:04:05.000", lines[1][1], time.Local)
	t.Logf("final wait of 11 s ended after %s with slurmctld stopped (%s)", t1.Sub(t0), lines[1][2])
	// A query still waiting for slurmctld at the bound adds "(slurmctld did
	// not answer the last query)"; one that gave up by itself (Slurm's
	// MessageTimeout, 10 s, close to the bound) just before it does not:
	// either way the wait ended by its bound.
	if !strings.HasPrefix(lines[1][2], "final-scrape wait done after ") {
		t.Errorf("the final wait did not end by its bound: %q", lines[1][2])
	}
	if ms, _ := strconv.Atoi(lines[1][3]); ms < 11000 {
		t.Errorf("the final wait ended after %d ms, before its 11 s", ms)
	}
	if t1.Sub(t0) >= 60*time.Second {
		t.Errorf("the final wait took %s, not below UnkillableStepTimeout=60", t1.Sub(t0))
	}
	waitJobState(t, id, 60*time.Second, "COMPLETED") // once slurmctld is back
	waitNoCollector(t)
	waitIdle(t)
}

// buildForge compiles the libslurm forger (testdata/forge.c) into dir.
func buildForge(t *testing.T, dir string) string {
	t.Helper()
	forge := filepath.Join(dir, "forge")
	if out, err := run("gcc", "-O2", "-Wall", "-o", forge, filepath.Join(root, "tests/plugin/testdata/forge.c"), "-lslurm"); err != nil {
		t.Fatalf("building the libslurm forger: %v\n%s", err, out)
	}
	return forge
}

// TestJobSubmitFilterCapsForgedSpankEnv: the job_submit.lua the admin
// guide ships refuses, at the controller, a job-control variable set by
// hand through libslurm that is too large for the job prolog's exec (which
// would drain the node), and lets an ordinary one through.
func TestJobSubmitFilterCapsForgedSpankEnv(t *testing.T) {
	// Without the cap, the first --gym-otel job's prolog on a node says so
	// (once per node and finding: the markers of earlier runs go first).
	waitIdle(t)
	markers, _ := filepath.Glob(filepath.Join(recordDir, "*", ".submit-filter-warned"))
	for _, m := range markers {
		os.Remove(m)
	}
	nd := markerDir(t, "nofilter")
	r0 := asUser(t, 60*time.Second, tokenEnv(), fmt.Sprintf("sbatch -N1 --wait --gym-otel=job_dir=%s/run -o %s/job.out --wrap true", nd, nd))
	if r0.code != 0 {
		t.Fatalf("a job without the cap: %s %s", r0.stdout, r0.stderr)
	}
	if logs := slurmdLogs(t); !strings.Contains(logs, "has no JobSubmitPlugins: a job-control variable over 128 KiB") {
		t.Errorf("no prolog warning about the missing cap in slurmd's log")
	}
	waitNoCollector(t)
	lua := filepath.Join(stateDir, "job_submit.lua")
	if out, err := run("install", "-m", "0644", filepath.Join(root, "packaging/job_submit/gym-otel-cap.lua"), lua); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	t.Cleanup(func() { _ = os.Remove(lua) }) // after the default cluster is back
	withCluster(t, "--extra-conf", "JobSubmitPlugins=lua")
	waitIdle(t)
	d := markerDir(t, "filter")
	forge := buildForge(t, d)
	if err := os.WriteFile(d+"/big.spec", []byte(strings.Repeat("A", 140*1024)), 0o644); err != nil {
		t.Fatal(err)
	}
	r := asUser(t, 30*time.Second, nil, fmt.Sprintf("%s @%s/big.spec %s %s/big.out gn1", forge, d, d, d))
	if r.code == 0 {
		t.Fatalf("a 140 KiB job-control variable was accepted: %s", r.stdout)
	}
	if !strings.Contains(r.stdout+r.stderr, "job-control variable GYM_OTEL_SPEC is 143374 bytes, more than the 65536 allowed") {
		t.Errorf("no clear refusal: %s %s", r.stdout, r.stderr)
	}
	r = asUser(t, 30*time.Second, nil, fmt.Sprintf("%s not-a-spec %s %s/small.out gn1", forge, d, d))
	if r.code != 0 {
		t.Fatalf("an ordinary job-control variable was refused: %s %s", r.stdout, r.stderr)
	}
	waitFile(t, 60*time.Second, d+"/small.out")
	waitIdle(t)
	// With the cap in place (the controller's file is readable from the
	// nodes here), the prolog has nothing to say about it.
	markers, _ = filepath.Glob(filepath.Join(recordDir, "*", ".submit-filter-warned"))
	for _, m := range markers {
		os.Remove(m)
	}
	before := strings.Count(slurmdLogs(t), "JobSubmitPlugins")
	r = asUser(t, 60*time.Second, tokenEnv(), fmt.Sprintf("sbatch -N1 --wait --gym-otel=job_dir=%s/run -o %s/job.out --wrap true", d, d))
	if r.code != 0 {
		t.Fatalf("a --gym-otel job with the cap: %s %s", r.stdout, r.stderr)
	}
	if n := strings.Count(slurmdLogs(t), "JobSubmitPlugins"); n != before {
		t.Errorf("%d new warnings about the cap although it is in place", n-before)
	}
	waitNoCollector(t)
	waitIdle(t)
}

// TestNodePlugstackArgumentProblem: by the time the job's prolog runs, the
// node's plugstack has an otel key whose value the Go core refuses (the
// submit host's was good: the job was submitted before the change and
// starts later). The prolog starts no collector and still writes its failed
// record, so an on_failure=fail job fails with the reason rather than
// running without telemetry unannounced.
func TestNodePlugstackArgumentProblem(t *testing.T) {
	waitIdle(t)
	d := markerDir(t, "badarg")
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf("touch %s/ran\n", d))
	r := asUser(t, 30*time.Second, tokenEnv(), fmt.Sprintf("sbatch --parsable --begin=now+5 --gym-otel=on_failure=fail,job_dir=%s/run -o %s.out %s", d, d, script))
	if r.code != 0 {
		t.Fatalf("sbatch: %d %s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	withSnippet(t, strings.TrimSpace(goodConf)+" scrape_interval_seconds=0\n")
	state := waitJobState(t, id, 60*time.Second, "COMPLETED", "FAILED", "CANCELLED")
	out, _ := os.ReadFile(d + ".out")
	if state != "FAILED" {
		t.Errorf("job state %s: the job ran although the node's prolog could not start a collector:\n%s", state, out)
	}
	if _, err := os.Stat(d + "/ran"); err == nil {
		t.Error("on_failure=fail: the script ran")
	}
	if !strings.Contains(string(out), "scrape_interval_seconds") {
		t.Errorf("the job's output does not name the bad argument:\n%s", out)
	}
	waitIdle(t)
}
