//go:build vmguest

// Package guest is the suite `make vm-test` runs inside its guest (tests/vm):
// a Debian sid node with systemd as PID 1, the unified cgroup v2 hierarchy,
// and Slurm 26.05 with cgroup/v2, proctrack/cgroup, task/cgroup and
// PrologFlags=Alloc,Contain; slurmctld and slurmd of one node "vm" run as
// systemd services. Built on the host with `go test -c -tags vmguest` and
// run as root by the guest's run.sh once Slurm is up (never on the host: the
// tag keeps it out of `go test ./...`).
package guest

import (
	"bytes"
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

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/internal/slurmkit"
)

const (
	node      = "vm"
	cluster   = "gymvm"
	jobUser   = "gymuser"
	slurmdLog = "/var/log/slurm/slurmd.log"
	// patience bounds every wait: TCG is slow, a hung part is not.
	patience = 5 * time.Minute
)

var (
	payload   = envOr("GYM_VM_PAYLOAD", "/payload")
	collector = envOr("GYM_VM_COLLECTOR", "/usr/bin/otelcol-gym")
	token     = os.Getenv("GYM_VM_TOKEN")
	jobs      = envOr("GYM_VM_JOBS", "/jobs")
)

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

type result struct {
	stdout, stderr string
	code           int
}

func run(name string, args ...string) (string, error) {
	var b bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	return b.String(), err
}

// asUser runs script with sh as the job user, with the backend's token in
// OTEL_TOKEN (the site's token_env).
func asUser(t *testing.T, within time.Duration, script string) result {
	t.Helper()
	cmd := exec.Command("timeout", strconv.Itoa(int(within.Seconds())), "runuser", "-u", jobUser, "--", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "OTEL_TOKEN="+token)
	cmd.Dir = jobs
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code := 0
	if x, ok := err.(*exec.ExitError); ok {
		code = x.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{o.String(), e.String(), code}
}

// jobDir makes a directory of the job user's for one test.
func jobDir(t *testing.T, name string) string {
	t.Helper()
	d := filepath.Join(jobs, name)
	_ = os.RemoveAll(d)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := run("chown", jobUser+":"+jobUser, d); err != nil {
		t.Fatalf("chown %s: %v %s", d, err, out)
	}
	return d
}

// script writes an executable file the job user can run.
func script(t *testing.T, path, body string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// kit is this node's Slurm for the shared helpers (slurmkit).
var kit = &slurmkit.Cluster{Runner: slurmkit.Local{}, Nodes: []string{node}, User: jobUser,
	SlurmdLog: func(string) string { return slurmdLog }}

var submitted = regexp.MustCompile(`Submitted batch job (\d+)`)

// jobIDOf is the job id sbatch printed, or fails the test.
func jobIDOf(t *testing.T, r result) string {
	t.Helper()
	return slurmkit.JobIDOf(t, slurmkit.Result{Stdout: r.stdout, Stderr: r.stderr, Code: r.code})
}

// slurmd is the node's slurmd log.
func slurmd(t *testing.T) string { t.Helper(); return kit.SlurmdLogs(t) }

// jobLines are slurmd's log lines about job id (the plugin's and Slurm's).
func jobLines(log, id string) string {
	var b strings.Builder
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "job "+id+":") || strings.Contains(l, "JobId="+id+" ") || strings.Contains(l, "job_id="+id) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// userProcs are the job user's processes whose command line matches pat.
func userProcs(pat string) []string { return kit.UserProcs(node, pat) }

// waitFor polls cond every 200 ms until it is true or within has passed.
func waitFor(within time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(within); ; time.Sleep(200 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

func waitNoCollector(t *testing.T) {
	t.Helper()
	var left []string
	if !waitFor(patience, func() bool {
		left = kit.CollectorProcs(node)
		return len(left) == 0
	}) {
		t.Errorf("still running after the job: %v", left)
	}
}

func waitIdle(t *testing.T) {
	t.Helper()
	var s string
	if !waitFor(patience, func() bool {
		s, _ = run("sinfo", "-h", "-N", "-o", "%T")
		return strings.TrimSpace(s) == "idle"
	}) {
		t.Fatalf("node %s not idle: %q", node, s)
	}
}

func waitJobsGone(t *testing.T, ids []string) {
	t.Helper()
	waitJobsGoneWithin(t, ids, patience)
}

// waitJobsGoneWithin is waitJobsGone with its own bound.
func waitJobsGoneWithin(t *testing.T, ids []string, bound time.Duration) {
	t.Helper()
	var out string
	if !waitFor(bound, func() bool {
		out, _ = run("squeue", "-h", "-o", "%i", "-j", strings.Join(ids, ","))
		return strings.TrimSpace(out) == ""
	}) {
		t.Fatalf("jobs still queued or running: %s", strings.Join(strings.Fields(out), " "))
	}
}

func alive(pid int) bool { return slurmkit.Alive(pid) }

func readPid(t *testing.T, path string) int {
	t.Helper()
	var pid int
	var err error
	if !waitFor(time.Minute, func() bool {
		b, e := os.ReadFile(path)
		if e != nil {
			err = e
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}) {
		t.Fatalf("%s: %v", path, err)
	}
	return pid
}

// groupRel is the plugin's cgroup of job id on this node.
func groupRel(id string) string { return "gym_otel/" + cluster + "/" + node + "/job_" + id }

// groupPath is the plugin's cgroup of job id below /sys/fs/cgroup: on this
// systemd host the plugin's groups live in Slurm's delegated
// <slice>/[<node>_]slurmstepd.scope, which slurmd's cgroup/v2 plugin made.
func groupPath(t *testing.T, id string) string {
	t.Helper()
	scopes, _ := filepath.Glob("/sys/fs/cgroup/*.slice/*slurmstepd.scope")
	if len(scopes) != 1 {
		t.Fatalf("Slurm's slurmstepd scope: %v, want one", scopes)
	}
	return strings.TrimPrefix(scopes[0], "/sys/fs/cgroup/") + "/" + groupRel(id)
}

// recorder writes an otel.binary that saves its own /proc/<pid>/cgroup (and
// the file system type of /sys/fs/cgroup, as the collector sees it) into its
// output dir and then execs the real collector.
func recorder(t *testing.T, dir string) string {
	return script(t, filepath.Join(dir, "recorder-collector"), fmt.Sprintf(`#!/bin/sh
case "$1" in --version) exec %[1]s --version ;; esac
o=$(pwd -P) # the collector runs in its output dir
cat /proc/$$/cgroup > "$o/proc-cgroup"
stat -fc %%T /sys/fs/cgroup > "$o/cgroup-fs"
exec %[1]s "$@"
`, collector))
}

// TestNode: what the suite runs on. systemd is PID 1, /sys/fs/cgroup is
// cgroup2 alone (no v1 hierarchy), slurmd runs in its systemd service,
// Slurm is 26.05 with the cgroup/v2 plugin.
func TestNode(t *testing.T) {
	uname, _ := run("uname", "-r")
	fs, _ := run("stat", "-fc", "%T", "/sys/fs/cgroup")
	sd, _ := run("systemctl", "--version")
	sv, _ := run("sinfo", "-V")
	comm, _ := os.ReadFile("/proc/1/comm")
	t.Logf("kernel %s; /sys/fs/cgroup %s; PID 1 %s; %s; %s",
		strings.TrimSpace(uname), strings.TrimSpace(fs), strings.TrimSpace(string(comm)),
		strings.SplitN(sd, "\n", 2)[0], strings.TrimSpace(sv))
	if strings.TrimSpace(fs) != "cgroup2fs" {
		t.Errorf("/sys/fs/cgroup is %q, want cgroup2fs", strings.TrimSpace(fs))
	}
	if strings.TrimSpace(string(comm)) != "systemd" {
		t.Errorf("PID 1 is %q, want systemd", comm)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); regexp.MustCompile(`(?m) - cgroup cgroup `).Match(mi) {
		t.Errorf("a cgroup v1 hierarchy is mounted:\n%s", mi)
	}
	if !regexp.MustCompile(`^slurm(-wlm)? 26\.05\.`).MatchString(strings.TrimSpace(sv)) {
		t.Errorf("Slurm %q, want 26.05", strings.TrimSpace(sv))
	}
	cfg, _ := run("scontrol", "show", "config")
	for _, want := range []string{`ProctrackType\s*=\s*proctrack/cgroup`, `TaskPlugin\s*=\s*task/cgroup`, `PrologFlags\s*=\s*Alloc,Contain`, `CgroupPlugin\s*=\s*cgroup/v2`, `ConstrainRAMSpace\s*=\s*yes`, `ConstrainDevices\s*=\s*yes`, `ConstrainCores\s*=\s*yes`} {
		if !regexp.MustCompile(want).MatchString(cfg) {
			t.Errorf("scontrol show config: no %s", want)
		}
	}
	pid, _ := run("systemctl", "show", "-P", "MainPID", "slurmd")
	if pc, err := os.ReadFile("/proc/" + strings.TrimSpace(pid) + "/cgroup"); err != nil || !strings.Contains(string(pc), "slurmd.service") {
		t.Errorf("slurmd (pid %s) is not in slurmd.service: %s %v", strings.TrimSpace(pid), pc, err)
	}
}

// TestJob: one real `sbatch --gym-otel` job through slurmctld and slurmd.
// The collector ran in the plugin's group on cgroup2, its telemetry files
// exist, and nothing survives the job: no collector, no supervisor, no group.
func TestJob(t *testing.T) {
	waitIdle(t)
	d := jobDir(t, "job")
	bin := recorder(t, d)
	// One span to the job's collector (OTLP/HTTP JSON) from a step, with
	// the receiver's token the task gets in OTEL_EXPORTER_OTLP_HEADERS
	// ("Authorization=Bearer%20<token>").
	sh := script(t, filepath.Join(d, "job.sh"), `#!/bin/sh
now=$(date +%s%N)
srun -n1 sh -c 'curl -sS -o /dev/null -w "%{http_code}\n" -X POST -H "Content-Type: application/json" \
  -H "$(printf %s "$OTEL_EXPORTER_OTLP_HEADERS" | sed "s/%20/ /g; s/=/: /")" "$OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces" -d "$0"' \
  '{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"vm-job"}}]},"scopeSpans":[{"spans":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","name":"vm-span","kind":1,"startTimeUnixNano":"'$now'","endTimeUnixNano":"'$now'"}]}]}]}'
`)
	start := time.Now()
	r := asUser(t, patience, fmt.Sprintf("sbatch --wait -n1 --mem=200M --gym-otel=binary=%s,job_dir=%s/run -o %s/job.out %s", bin, d, d, sh))
	took := time.Since(start)
	if r.code != 0 {
		out, _ := os.ReadFile(d + "/job.out")
		t.Fatalf("sbatch --wait: exit %d: %s\n%s\nslurmd:\n%s", r.code, r.stderr, out, tail(slurmd(t), 40))
	}
	id := jobIDOf(t, r)
	waitNoCollector(t)
	waitIdle(t)
	log := slurmd(t)
	t.Logf("job %s: %.1f s from sbatch to its end; slurmd:\n%s", id, took.Seconds(), jobLines(log, id))
	rel := groupRel(id)
	pc, err := os.ReadFile(filepath.Join(d, "run", "otel", "proc-cgroup"))
	if err != nil {
		out, _ := os.ReadFile(d + "/job.out")
		t.Fatalf("the collector never started: %v\njob output:\n%s\nslurmd:\n%s", err, out, tail(log, 60))
	}
	if want := "0::/" + groupPath(t, id); strings.TrimSpace(string(pc)) != want {
		t.Errorf("the collector started in %q, want %s", strings.TrimSpace(string(pc)), want)
	}
	if fs, _ := os.ReadFile(filepath.Join(d, "run", "otel", "cgroup-fs")); strings.TrimSpace(string(fs)) != "cgroup2fs" {
		t.Errorf("the collector saw /sys/fs/cgroup as %q", fs)
	}
	if !regexp.MustCompile(`job ` + id + `: collector ready on ` + node + ` \(.*cgroup ` + regexp.QuoteMeta(rel) + `\)`).MatchString(log) {
		t.Errorf("no ready line naming the group %s in slurmd's log", rel)
	}
	if !regexp.MustCompile(`job ` + id + `: collector cgroup ` + regexp.QuoteMeta(rel) + `: peak memory`).MatchString(log) {
		t.Errorf("no cost line of the group %s in slurmd's log (the epilog did not end it)", rel)
	}
	for _, p := range []string{"otel/collector.yaml", "otel/metrics.jsonl", "otel/traces.jsonl"} {
		if _, err := os.Stat(filepath.Join(d, "run", p)); err != nil {
			t.Errorf("collector output: %v", err)
		}
	}
	// The job's output: the plugin's two lines naming the job's files
	// and backend (job_output=on, the batch step's task 0, first), then
	// the step's HTTP code.
	out, _ := os.ReadFile(d + "/job.out")
	var notice, step []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(l, "gym-otel: ") {
			notice = append(notice, l)
		} else {
			step = append(step, l)
		}
	}
	if want := "gym-otel: job " + id + "'s telemetry: files under " + d + "/run/otel (node " + node + "), shipped to http://127.0.0.1:4318"; len(notice) != 2 || notice[0] != want ||
		notice[1] != "gym-otel: read it: gym-otel-spank inspect "+d+"/run/otel (complete once the job has ended)" {
		t.Errorf("the plugin's lines in the job's output: %q, want %q and the inspect line", notice, want)
	}
	if strings.Join(step, "\n") != "200" {
		t.Errorf("the step's OTLP POST to the job's collector: %q, want 200 (the job's output: %q)", step, out)
	}
	if tr, _ := os.ReadFile(filepath.Join(d, "run", "otel", "traces.jsonl")); !strings.Contains(string(tr), "vm-span") {
		t.Errorf("the step's span is not in the job's traces.jsonl")
	}
	if _, err := os.Stat("/sys/fs/cgroup/" + groupPath(t, id)); err == nil {
		t.Errorf("the group /sys/fs/cgroup/%s is left", groupPath(t, id))
	}
	if ents, _ := filepath.Glob("/run/gym-otel/*/" + id); len(ents) > 0 {
		t.Errorf("record dirs left: %v", ents)
	}
	// The node's packet filter held the job's ports (the step's POST above
	// went through it) and is gone with the job.
	if strings.Contains(jobLines(log, id), "not kept to the job") || strings.Contains(log, "ports are not kept to the job") {
		t.Errorf("the job's ports were not filtered on cgroup v2:\n%s", jobLines(log, id))
	}
	if out, err := exec.Command("nft", "list", "table", "inet", "gym_otel").CombinedOutput(); err != nil {
		t.Errorf("nft list table inet gym_otel: %v: %s (the prolog installed no filter)", err, out)
	} else if strings.Contains(string(out), "job_"+id+"_") {
		t.Errorf("the job's filter is left after its epilog:\n%s", out)
	}
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// TestManyShortJobs: short --gym-otel jobs submitted at once to the one
// node (2 CPUs: waves of two, one job's epilog removing its group while the
// next one's prolog creates its own). Every collector starts inside its
// own group; no group and no collector is left.
func TestManyShortJobs(t *testing.T) {
	waitIdle(t)
	n, _ := strconv.Atoi(envOr("GYM_VM_SHORT_JOBS", "8"))
	d := jobDir(t, "many")
	bin := recorder(t, d)
	sh := script(t, filepath.Join(d, "short.sh"), "#!/bin/sh\ntrue\n")
	start := time.Now()
	r := asUser(t, patience, fmt.Sprintf(`for i in $(seq %d); do sbatch -n1 --mem=100M --gym-otel=binary=%s,job_dir=%s/run-%%j -o %s/%%j.out %s || exit 1; done`, n, bin, d, d, sh))
	if r.code != 0 {
		t.Fatalf("sbatch: exit %d: %s", r.code, r.stderr)
	}
	var ids []string
	for _, m := range submitted.FindAllStringSubmatch(r.stdout, -1) {
		ids = append(ids, m[1])
	}
	if len(ids) != n {
		t.Fatalf("%d jobs submitted: %s", len(ids), r.stdout)
	}
	// Two at a time on the node's 2 CPUs, each prolog up to its 120 s
	// under TCG (a collector's start took 47-58 s with two starting at
	// once on a loaded host, 8 jobs more than 5 minutes): a minute per
	// job, at least patience.
	waitJobsGoneWithin(t, ids, max(patience, time.Duration(n)*time.Minute))
	waitNoCollector(t)
	waitIdle(t)
	log := slurmd(t)
	contained := 0
	for _, id := range ids {
		rel := groupRel(id)
		pc, err := os.ReadFile(filepath.Join(d, "run-"+id, "otel", "proc-cgroup"))
		switch {
		case err != nil:
			t.Errorf("job %s: the collector never started: %v\n%s", id, err, jobLines(log, id))
		case strings.TrimSpace(string(pc)) != "0::/"+groupPath(t, id):
			t.Errorf("job %s: the collector started outside its group %s: %s", id, rel, pc)
		default:
			contained++
		}
		if strings.Contains(log, "job "+id+": no cgroup for the collector") {
			t.Errorf("job %s: ran without a cgroup", id)
		}
		if _, err := os.Stat("/sys/fs/cgroup/" + groupPath(t, id)); err == nil {
			t.Errorf("job %s: its group is left", id)
		}
	}
	t.Logf("%d short jobs at once: %d collectors in their group, %.1f s from the first sbatch to the node idle",
		n, contained, time.Since(start).Seconds())
}

// TestSurvivors: the collector's binary leaves a setsid child and a
// double-forked one, both ignoring SIGTERM. Neither survives the job.
func TestSurvivors(t *testing.T) {
	waitIdle(t)
	d := jobDir(t, "survivors")
	bin := script(t, filepath.Join(d, "forking-collector"), fmt.Sprintf(`#!/bin/sh
case "$1" in --version) exec %[1]s --version ;; esac
setsid sh -c 'trap "" TERM; echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; exec sleep 1000' %[2]s/a.pid </dev/null >/dev/null 2>&1 &
(sh -c 'trap "" TERM; echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; exec sleep 1000' %[2]s/b.pid </dev/null >/dev/null 2>&1 &)
exec %[1]s "$@"
`, collector, d))
	sh := script(t, filepath.Join(d, "job.sh"), fmt.Sprintf("#!/bin/sh\ni=0; while { [ ! -s %[1]s/a.pid ] || [ ! -s %[1]s/b.pid ]; } && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done\n", d))
	r := asUser(t, patience, fmt.Sprintf("sbatch --wait -n1 --mem=200M --gym-otel=binary=%s,job_dir=%s/run -o %s/job.out %s", bin, d, d, sh))
	if r.code != 0 {
		t.Fatalf("sbatch: exit %d: %s", r.code, r.stderr)
	}
	id := jobIDOf(t, r)
	a, b := readPid(t, d+"/a.pid"), readPid(t, d+"/b.pid")
	waitNoCollector(t)
	if !waitFor(time.Minute, func() bool { return !alive(a) && !alive(b) }) {
		pc, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", a))
		t.Errorf("survived job %s: setsid child %d alive %v, double-forked %d alive %v (cgroup %s)", id, a, alive(a), b, alive(b), pc)
	}
	if left := userProcs("sleep 1000"); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	log := slurmd(t)
	if m := regexp.MustCompile(`job ` + id + `: killed (\d+) processes left in the collector's cgroup`).FindStringSubmatch(log); m != nil {
		t.Logf("job %s: the epilog killed %s processes left in the group", id, m[1])
	}
	waitIdle(t)
}

// TestMemoryHog: the collector's binary makes a process of its group hold
// 450 MiB of anonymous memory in a job with --mem=300M and
// memory_limit_mib=4096 (a bound of 2 x that, capped by the site at
// 2048 MiB, until the job's memory is known). Once the extern step knows
// the job's memory the group's bound is the job's 300 MiB: the kernel
// reclaims, then OOM-kills inside the group; the hog is gone during the
// job, and the epilog's cost line shows the bound at 300 MiB.
func TestMemoryHog(t *testing.T) {
	waitIdle(t)
	d := jobDir(t, "hog")
	const hold = 450
	bin := script(t, filepath.Join(d, "hog-collector"), fmt.Sprintf(`#!/bin/sh
case "$1" in --version) exec %[1]s --version ;; esac
o=$(pwd -P) # the collector runs in its output dir
(head -c %[2]dM /dev/zero; exec sleep 1000) | tail -c %[2]dM &
h=$!
echo $h > "$o/hog.pid"
# The hog's size is noted beside the collector, not before it: under TCG
# on a loaded host the hog may grow slower than the health check waits.
(i=0
while [ "$(awk '/^VmRSS/ {print $2}' /proc/$h/status 2>/dev/null || echo 0)" -lt %[3]d ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
awk '/^VmRSS/ {print $2}' /proc/$h/status > "$o/hog.rss" 2>/dev/null) &
exec %[1]s "$@"
`, collector, hold, hold*1000))
	sh := script(t, filepath.Join(d, "job.sh"), fmt.Sprintf(`#!/bin/sh
h=$(cat %[1]s/run/otel/hog.pid)
# A killed hog stays a zombie of the collector it was left to (the
# wrapper exec'd it, and it reaps only its own children): gone is not
# running, zombie or not.
alive() { [ -e /proc/$1 ] && ! grep -q ') Z ' /proc/$1/stat 2>/dev/null; }
i=0; while alive "$h" && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
if alive "$h"; then echo alive; else echo gone; fi > %[1]s/hog.state
`, d))
	r := asUser(t, patience, fmt.Sprintf("sbatch --wait -n1 --mem=300M --gym-otel=binary=%s,memory_limit_mib=4096,job_dir=%s/run -o %s/job.out %s", bin, d, d, sh))
	if r.code != 0 {
		out, _ := os.ReadFile(d + "/job.out")
		t.Fatalf("sbatch: exit %d: %s\n%s", r.code, r.stderr, out)
	}
	id := jobIDOf(t, r)
	waitNoCollector(t)
	waitIdle(t)
	log := slurmd(t)
	t.Logf("job %s: slurmd:\n%s", id, jobLines(log, id))
	rss, _ := os.ReadFile(d + "/run/otel/hog.rss")
	if st, _ := os.ReadFile(d + "/hog.state"); strings.TrimSpace(string(st)) != "gone" {
		t.Errorf("the process holding %d MiB (VmRSS %s kB) in a group bounded by the job's 300 MiB was %q during the job, want gone",
			hold, strings.TrimSpace(string(rss)), strings.TrimSpace(string(st)))
	}
	m := regexp.MustCompile(`job ` + id + `: collector cgroup \S+: peak memory ([0-9.]+) MiB \(bound ([0-9]+) MiB\), CPU [0-9.]+ s, (\d+) OOM kills`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no cost line for job %s in slurmd's log", id)
	}
	if m[2] != "300" {
		t.Errorf("the group's bound was %s MiB at the end, want the job's 300", m[2])
	}
	if m[3] == "0" {
		t.Errorf("no OOM kill counted in the group (peak %s MiB)", m[1])
	}
	t.Logf("job %s: the hog held %s kB; peak %s MiB, bound %s MiB, %s OOM kills", id, strings.TrimSpace(string(rss)), m[1], m[2], m[3])
	if left := userProcs("sleep 1000"); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestForgedValuesRefused: a spec set by hand through libslurm (forge, no
// plugin at submit) with a memory_limit_mib of 0, and one so large that its
// bound would overflow: the prolog refuses each by name, no collector
// starts, the forged binary never runs.
func TestForgedValuesRefused(t *testing.T) {
	waitIdle(t)
	forge := filepath.Join(payload, "bin", "forge")
	if _, err := os.Stat(forge); err != nil {
		t.Fatalf("forge: %v", err)
	}
	d := jobDir(t, "forged")
	bin := recorder(t, d)
	for _, c := range []struct {
		mib  int
		want string
	}{
		{0, "otel.memory_limit_mib: 0 is out of range 32..65536"},
		{1 << 50, "otel.memory_limit_mib: 1125899906842624 is out of range 32..65536"},
	} {
		forged := &config.Resolved{Version: config.EncodedVersion, Otel: config.Defaults(), JobDir: fmt.Sprintf("%s/run-%d", d, c.mib)}
		forged.Otel.Endpoint, forged.Otel.ServiceName, forged.Otel.Binary = "http://127.0.0.1:4318", "forged", bin
		forged.Otel.GPUMetricsPort, forged.Otel.NodeMetricsPort = 0, 0
		forged.Otel.MemoryLimitMiB = c.mib
		enc, err := forged.Encode()
		if err != nil {
			t.Fatal(err)
		}
		out := fmt.Sprintf("%s/forged-%d.out", d, c.mib)
		r := asUser(t, time.Minute, fmt.Sprintf("%s %s %s %s %s", forge, enc, d, out, node))
		if r.code != 0 {
			t.Fatalf("forge: exit %d: %s %s", r.code, r.stdout, r.stderr)
		}
		id := jobIDOf(t, r)
		waitJobsGone(t, []string{id})
		log := slurmd(t)
		if !regexp.MustCompile(`job ` + id + `: .*` + regexp.QuoteMeta(c.want)).MatchString(log) {
			t.Errorf("memory_limit_mib=%d: the prolog did not refuse it by name (%q); slurmd:\n%s", c.mib, c.want, jobLines(log, id))
		}
		if strings.Contains(log, "job "+id+": collector ready") {
			t.Errorf("memory_limit_mib=%d: a collector started", c.mib)
		}
		if _, err := os.Stat(filepath.Join(forged.JobDir, "otel", "proc-cgroup")); err == nil {
			t.Errorf("memory_limit_mib=%d: the forged binary ran", c.mib)
		}
	}
	waitNoCollector(t)
	waitIdle(t)
}

// TestDeviceNotGiven needs the plugin's v2 device program (issue 22); on a
// plugin without one it fails, naming why. A character device with
// NVIDIA's major (195) made by mknod, mode 0666, that the job was not
// given (no GRES): the collector's binary opens it from inside the
// plugin's group. With no driver behind major 195 an allowed open fails
// with ENXIO ("No such device or address"); a device program's denial is
// EPERM ("Operation not permitted"). /dev/null, which every job may
// open, opens.
func TestDeviceNotGiven(t *testing.T) {
	waitIdle(t)
	dev := "/dev/nvidia-gymvm0"
	_ = os.Remove(dev)
	if err := syscall.Mknod(dev, syscall.S_IFCHR|0o666, int(195<<8|0)); err != nil {
		t.Fatalf("mknod %s c 195 0: %v", dev, err)
	}
	_ = os.Chmod(dev, 0o666)
	defer os.Remove(dev)
	d := jobDir(t, "device")
	bin := script(t, filepath.Join(d, "opening-collector"), fmt.Sprintf(`#!/bin/sh
case "$1" in --version) exec %[1]s --version ;; esac
o=$(pwd -P) # the collector runs in its output dir
cat /proc/$$/cgroup > "$o/proc-cgroup"
if head -c 0 %[2]s 2> "$o/open-gpu.err"; then echo opened; else echo refused; fi > "$o/open-gpu"
if head -c 0 /dev/null 2> "$o/open-null.err"; then echo opened; else echo refused; fi > "$o/open-null"
exec %[1]s "$@"
`, collector, dev))
	sh := script(t, filepath.Join(d, "job.sh"), "#!/bin/sh\ntrue\n")
	r := asUser(t, patience, fmt.Sprintf("sbatch --wait -n1 --mem=200M --gym-otel=binary=%s,job_dir=%s/run -o %s/job.out %s", bin, d, d, sh))
	if r.code != 0 {
		t.Fatalf("sbatch: exit %d: %s", r.code, r.stderr)
	}
	id := jobIDOf(t, r)
	waitNoCollector(t)
	o := filepath.Join(d, "run", "otel")
	pc, _ := os.ReadFile(o + "/proc-cgroup")
	gpu, _ := os.ReadFile(o + "/open-gpu")
	gpuErr, _ := os.ReadFile(o + "/open-gpu.err")
	null, _ := os.ReadFile(o + "/open-null")
	t.Logf("job %s, collector in %s: open %s (c 195:0): %s %s; open /dev/null: %s",
		id, strings.TrimSpace(string(pc)), dev, strings.TrimSpace(string(gpu)), strings.TrimSpace(string(gpuErr)), strings.TrimSpace(string(null)))
	if strings.TrimSpace(string(pc)) != "0::/"+groupPath(t, id) {
		t.Errorf("the binary ran in %q, not the plugin's group", strings.TrimSpace(string(pc)))
	}
	if strings.TrimSpace(string(null)) != "opened" {
		t.Errorf("/dev/null could not be opened: the device program denies too much")
	}
	if !strings.Contains(string(gpuErr), "Operation not permitted") {
		t.Errorf("NEEDS THE V2 DEVICE PROGRAM: %s (c 195:0, not given to the job) was not denied by the plugin's group: %s %s",
			dev, strings.TrimSpace(string(gpu)), strings.TrimSpace(string(gpuErr)))
	}
	waitIdle(t)
}

// TestSystemdOperations: systemd's own operations while a flagged job runs
// leave the plugin's group alone: `systemctl daemon-reload`, a restart of
// slurmd (its steps' slurmstepd and the delegated scope outlive it), then
// the job's end removes the group and leaves nothing behind. (A reboot
// mid-job is not run here: the guest runs once; after one, the node's
// cgroup tree is new and the prolog's orphan sweep removes what a record
// left: see docs/admin-guide.md.)
func TestSystemdOperations(t *testing.T) {
	waitIdle(t)
	d := jobDir(t, "systemd-ops")
	sh := script(t, filepath.Join(d, "job.sh"), fmt.Sprintf("#!/bin/sh\ni=0; while [ ! -e %[1]s/end ] && [ $i -lt 1800 ]; do sleep 0.1; i=$((i+1)); done\n", d))
	r := asUser(t, patience, fmt.Sprintf("sbatch -n1 --mem=200M --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, sh))
	if r.code != 0 {
		t.Fatalf("sbatch: exit %d: %s", r.code, r.stderr)
	}
	id := jobIDOf(t, r)
	var pids []string
	group := ""
	// The job runs once its prolog has its collector ready: the collector
	// is then the otelcol-gym with a --config (not the prolog's --version
	// check).
	if !waitFor(patience, func() bool {
		st, _ := run("squeue", "-h", "-o", "%T", "-j", id)
		if strings.TrimSpace(st) != "RUNNING" {
			return false
		}
		pids = userProcs("otelcol-gym.*--config")
		if len(pids) == 0 {
			return false
		}
		group = "/sys/fs/cgroup/" + groupPath(t, id)
		_, err := os.Stat(group)
		return err == nil
	}) {
		t.Fatalf("job %s: no collector in a group (collectors %v, group %q)\nslurmd:\n%s", id, pids, group, jobLines(slurmd(t), id))
	}
	pid, _ := strconv.Atoi(strings.Fields(pids[0])[0])
	inGroup := func(what string) {
		t.Helper()
		pc, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil || !alive(pid) {
			t.Fatalf("after %s: the collector %d is gone (%v)", what, pid, err)
		}
		if want := "0::/" + groupPath(t, id); strings.TrimSpace(string(pc)) != want {
			t.Errorf("after %s: the collector is in %q, want %s", what, strings.TrimSpace(string(pc)), want)
		}
		if _, err := os.Stat(group); err != nil {
			t.Errorf("after %s: the group %s is gone: %v", what, group, err)
		}
	}
	inGroup("the job's start")
	if out, err := run("systemctl", "daemon-reload"); err != nil {
		t.Fatalf("daemon-reload: %v %s", err, out)
	}
	time.Sleep(2 * time.Second) // systemd re-applies its units' settings asynchronously
	inGroup("systemctl daemon-reload")
	if out, err := run("systemctl", "restart", "slurmd"); err != nil {
		t.Fatalf("restart slurmd: %v %s", err, out)
	}
	if !waitFor(patience, func() bool {
		s, _ := run("sinfo", "-h", "-N", "-o", "%T")
		s = strings.TrimSpace(s)
		return s == "allocated" || s == "mixed"
	}) {
		t.Fatalf("node not back after slurmd's restart")
	}
	inGroup("systemctl restart slurmd")
	if err := os.WriteFile(d+"/end", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitJobsGone(t, []string{id})
	waitNoCollector(t)
	waitIdle(t)
	if _, err := os.Stat(group); err == nil {
		t.Errorf("job %s: its group %s is left after the job", id, group)
	}
	t.Logf("job %s: the collector %d stayed in %s through daemon-reload and a slurmd restart; the group went with the job", id, pid, group)
}

// TestCPUBound: the plugin's group in Slurm's delegated scope gets the
// cpuset controller (systemd's Delegate=yes enables it in the scope's
// cgroup.subtree_control, the plugin in each level below), and with
// ConstrainCores the job's extern step narrows the group to the job's CPUs
// on the node before the batch script runs: a -c1 job on this 2-CPU node
// finds the group's cpuset.cpus.effective, and the affinity of every
// process in it, equal to its own CPUs. It also records the memory window:
// the group's memory.max when the collector starts (in the prolog, before
// Slurm tells the node the job's memory) and when the batch script starts
// (after the extern step lowered it to the job's --mem).
func TestCPUBound(t *testing.T) {
	waitIdle(t)
	d := jobDir(t, "cpu")
	bin := script(t, filepath.Join(d, "cpu-collector"), fmt.Sprintf(`#!/bin/sh
case "$1" in --version) exec %[1]s --version ;; esac
o=$(pwd -P) # the collector runs in its output dir
g=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/$$/cgroup)
cat "$g/memory.max" > "$o/memory-max-at-start"
exec %[1]s "$@"
`, collector))
	sh := script(t, filepath.Join(d, "job.sh"), fmt.Sprintf(`#!/bin/sh
sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status > %[1]s/job-cpus.tmp
mv %[1]s/job-cpus.tmp %[1]s/job-cpus
i=0; while [ ! -e %[1]s/checked ] && [ $i -lt 1200 ]; do sleep 0.5; i=$((i+1)); done
`, d))
	r := asUser(t, patience, fmt.Sprintf("sbatch -c1 --mem=200M --gym-otel=binary=%s,memory_limit_mib=300,job_dir=%s/run -o %s/job.out %s", bin, d, d, sh))
	if r.code != 0 {
		t.Fatalf("sbatch: exit %d: %s", r.code, r.stderr)
	}
	id := jobIDOf(t, r)
	defer func() {
		_ = os.WriteFile(filepath.Join(d, "checked"), nil, 0o644)
		waitJobsGone(t, []string{id})
		waitNoCollector(t)
		waitIdle(t)
	}()
	var jobCPUs []byte
	if !waitFor(patience, func() bool {
		var err error
		jobCPUs, err = os.ReadFile(filepath.Join(d, "job-cpus"))
		return err == nil
	}) {
		out, _ := os.ReadFile(d + "/job.out")
		t.Fatalf("the batch script never ran: %s\nslurmd:\n%s", out, tail(slurmd(t), 40))
	}
	want := strings.TrimSpace(string(jobCPUs))
	g := "/sys/fs/cgroup/" + groupPath(t, id)
	scope := filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(g))))
	rd := func(p string) string { b, _ := os.ReadFile(p); return strings.TrimSpace(string(b)) }
	t.Logf("job %s: the batch script's CPUs %q; %s/cgroup.subtree_control %q; the group's cgroup.controllers %q, cpuset.cpus %q, cpuset.cpus.effective %q; all CPUs %q",
		id, want, scope, rd(scope+"/cgroup.subtree_control"), rd(g+"/cgroup.controllers"), rd(g+"/cpuset.cpus"), rd(g+"/cpuset.cpus.effective"), rd("/sys/fs/cgroup/cpuset.cpus.effective"))
	start, now := rd(filepath.Join(d, "run", "otel", "memory-max-at-start")), rd(g+"/memory.max")
	t.Logf("job %s (--mem=200M, memory_limit_mib=300): the group's memory.max %s when the collector started (prolog), %s when the batch script ran", id, start, now)
	if now != strconv.Itoa(200<<20) {
		t.Errorf("the group's memory.max when the batch script ran: %s, want the job's %d", now, 200<<20)
	}
	if start != strconv.Itoa(600<<20) {
		t.Errorf("the group's memory.max when the collector started: %q, want 2 x memory_limit_mib, %d", start, 600<<20)
	}
	if want == rd("/sys/fs/cgroup/cpuset.cpus.effective") {
		t.Errorf("the job's CPUs %q are all the node's: Slurm bound nothing (ConstrainCores?)", want)
	}
	if !strings.Contains(" "+rd(scope+"/cgroup.subtree_control")+" ", " cpuset ") {
		t.Fatalf("the scope %s does not enable cpuset for its children", scope)
	}
	if got := rd(g + "/cpuset.cpus.effective"); got != want {
		t.Errorf("the group's cpuset.cpus.effective %q, want the job's %q", got, want)
	}
	pids := strings.Fields(rd(g + "/cgroup.procs"))
	if len(pids) == 0 {
		t.Errorf("no process in the group %s", g)
	}
	for _, p := range pids {
		st, _ := os.ReadFile("/proc/" + p + "/status")
		m := regexp.MustCompile(`(?m)^Cpus_allowed_list:\s*(\S+)`).FindSubmatch(st)
		if m == nil || string(m[1]) != want {
			t.Errorf("process %s of the group runs on CPUs %q, want the job's %q", p, m, want)
		}
	}
}
