//go:build vmguest

package guest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
)

// recordDir is the plugin's record_dir on the guest: the default (/run,
// emptied by every boot) for the suite, /var/lib/gym-otel (kept across a
// reboot) for the reboot phases, which run.sh configures.
var recordDir = envOr("GYM_VM_RECORD_DIR", "/run/gym-otel")

// runningJob is one flagged job whose batch script waits for <dir>/end, once
// it runs with its collector in the plugin's group.
type runningJob struct {
	id, dir, group, scope string
	pid                   int // the collector's
}

// startWaitingJob submits a --no-requeue flagged job that runs until
// <dir>/end exists (or 30 min) and returns once slurmctld says RUNNING and
// the collector (the otelcol-gym with a --config) runs in an existing group.
func startWaitingJob(t *testing.T, name string) runningJob {
	t.Helper()
	d := jobDir(t, name)
	sh := script(t, filepath.Join(d, "job.sh"), fmt.Sprintf("#!/bin/sh\ni=0; while [ ! -e %[1]s/end ] && [ $i -lt 18000 ]; do sleep 0.1; i=$((i+1)); done\n", d))
	r := asUser(t, patience, fmt.Sprintf("sbatch -n1 --mem=200M --no-requeue --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, sh))
	if r.code != 0 {
		t.Fatalf("sbatch: exit %d: %s", r.code, r.stderr)
	}
	j := runningJob{id: jobIDOf(t, r), dir: d}
	var pids []string
	if !waitFor(patience, func() bool {
		st, _ := run("squeue", "-h", "-o", "%T", "-j", j.id)
		if strings.TrimSpace(st) != "RUNNING" {
			return false
		}
		pids = userProcs("otelcol-gym.*--config")
		if len(pids) == 0 {
			return false
		}
		j.group = "/sys/fs/cgroup/" + groupPath(t, j.id)
		_, err := os.Stat(j.group)
		return err == nil
	}) {
		t.Fatalf("job %s: no collector in a group (collectors %v, group %q)\nslurmd:\n%s", j.id, pids, j.group, jobLines(slurmd(t), j.id))
	}
	j.pid, _ = strconv.Atoi(strings.Fields(pids[0])[0])
	j.scope = filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(j.group))))
	return j
}

// groupProcs is the content of a group's cgroup.procs, "gone" when the
// group is.
func groupProcs(group string) string {
	b, err := os.ReadFile(filepath.Join(group, "cgroup.procs"))
	if err != nil {
		return "gone"
	}
	return "[" + strings.Join(strings.Fields(string(b)), " ") + "]"
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// state is one line on what is left of job j: its collector, supervisor
// and the job user's processes, its group (with its processes), Slurm's
// scope, its record dir, and slurmctld's job and node states.
func (j runningJob) state() string {
	st, _ := run("squeue", "-h", "-o", "%T", "-j", j.id)
	sc, _ := run("scontrol", "show", "job", j.id)
	js := ""
	for _, f := range strings.Fields(sc) {
		if strings.HasPrefix(f, "JobState=") || strings.HasPrefix(f, "Reason=") {
			js += f + " "
		}
	}
	nd, _ := run("sinfo", "-h", "-N", "-o", "%T %E")
	return fmt.Sprintf("collector %d alive=%v; supervisors %d; job user's processes %d; group procs %s; scope %s exists=%v; record exists=%v; squeue %q; %s; node %q",
		j.pid, alive(j.pid), len(userProcs("supervise --from-env")), len(userProcs(".")), groupProcs(j.group),
		filepath.Base(j.scope), exists(j.scope), exists(filepath.Join(recordDir, node, j.id)),
		strings.TrimSpace(st), strings.TrimSpace(js), strings.TrimSpace(nd))
}

// nodeBack waits until the node takes jobs again, resuming it (the admin's
// scontrol update) if slurmctld set it down or drained, and reports what it
// took.
func nodeBack(t *testing.T) string {
	t.Helper()
	resumed := false
	var s string
	if !waitFor(patience, func() bool {
		s, _ = run("sinfo", "-h", "-N", "-o", "%T")
		s = strings.TrimSpace(s)
		if !resumed && (strings.HasPrefix(s, "down") || strings.HasPrefix(s, "drain")) {
			out, _ := run("scontrol", "update", "nodename="+node, "state=resume")
			t.Logf("node %s was %q: scontrol update state=resume: %s", node, s, strings.TrimSpace(out))
			resumed = true
		}
		return s == "idle"
	}) {
		t.Fatalf("node %s not idle: %q", node, s)
	}
	if resumed {
		return "idle after scontrol update state=resume"
	}
	return "idle by itself"
}

// followUp runs one short flagged job to its end (its prolog sweeps stale
// records and orphaned groups, its epilog orphaned groups) and returns its
// id.
func followUp(t *testing.T, name string) string {
	t.Helper()
	d := jobDir(t, name)
	sh := script(t, filepath.Join(d, "job.sh"), "#!/bin/sh\ntrue\n")
	r := asUser(t, patience, fmt.Sprintf("sbatch --wait -n1 --mem=100M --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, sh))
	if r.code != 0 {
		t.Fatalf("the follow-up job: sbatch: exit %d: %s %s\nslurmd:\n%s", r.code, r.stdout, r.stderr, tail(slurmd(t), 40))
	}
	id := jobIDOf(t, r)
	waitNoCollector(t)
	waitIdle(t)
	return id
}

// cleanupLines are slurmd's lines of the plugin about job old's record and
// group (its epilog's, and other jobs' sweeps).
func cleanupLines(log, old string) string {
	var b strings.Builder
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "job "+old+" ") || strings.Contains(l, "job "+old+",") ||
			(strings.Contains(l, "job "+old+":") && (strings.Contains(l, "epilog") || strings.Contains(l, "group") || strings.Contains(l, "record"))) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// nothingLeft fails when anything of job id is left: a collector or
// supervisor, its group (in any slurmstepd scope), its record dir.
func nothingLeft(t *testing.T, id, group string) {
	t.Helper()
	waitNoCollector(t)
	if exists(group) {
		t.Errorf("job %s: its group %s is left (procs %s)", id, group, groupProcs(group))
	}
	if g, _ := filepath.Glob("/sys/fs/cgroup/*.slice/*slurmstepd.scope/" + groupRel(id)); len(g) > 0 {
		t.Errorf("job %s: its group is left: %v", id, g)
	}
	if p := filepath.Join(recordDir, node, id); exists(p) {
		t.Errorf("job %s: its record %s is left", id, p)
	}
}

// TestStopSlurmdAndScope: `systemctl stop slurmd` while a flagged job runs
// leaves the job, its collector and the plugin's group alone (the steps
// and the group live in Slurm's delegated slurmstepd scope, not in
// slurmd.service); then `systemctl stop` of that scope (the bare unit name)
// ends every process in it, the collector and its supervisor included,
// and the group is removed (by systemd with the scope, or by the job's
// epilog or the next prolog's or epilog's sweep). After slurmd's restart
// (which makes the scope again) the node takes jobs, and once a follow-up
// flagged job has run nothing of the first job is left.
func TestStopSlurmdAndScope(t *testing.T) {
	waitIdle(t)
	j := startWaitingJob(t, "scope-stop")
	unit := filepath.Base(j.scope)
	t.Logf("job %s: collector %d in %s (scope unit %s)", j.id, j.pid, j.group, unit)

	if out, err := run("systemctl", "stop", "slurmd"); err != nil {
		t.Fatalf("systemctl stop slurmd: %v %s", err, out)
	}
	time.Sleep(5 * time.Second)
	t.Logf("5 s after systemctl stop slurmd: %s", j.state())
	if !alive(j.pid) || groupProcs(j.group) == "gone" {
		t.Errorf("systemctl stop slurmd ended the job's collector or group: %s", j.state())
	}
	if out, err := run("systemctl", "start", "slurmd"); err != nil {
		t.Fatalf("systemctl start slurmd: %v %s", err, out)
	}
	if !waitFor(patience, func() bool {
		s, _ := run("sinfo", "-h", "-N", "-o", "%T")
		s = strings.TrimSpace(s)
		return s == "allocated" || s == "mixed"
	}) {
		t.Fatalf("node not back after slurmd's start: %s", j.state())
	}
	t.Logf("after systemctl start slurmd: %s", j.state())
	if !alive(j.pid) {
		t.Errorf("the collector is gone after slurmd's stop and start")
	}

	start := time.Now()
	out, err := run("systemctl", "stop", unit)
	stopped := time.Since(start)
	t.Logf("systemctl stop %s: %v %s(returned in %.1f s)", unit, err, out, stopped.Seconds())
	t.Logf("when systemctl stop returned: %s", j.state())
	var gone time.Duration
	if !waitFor(patience, func() bool { return !alive(j.pid) && len(userProcs("supervise --from-env")) == 0 }) {
		t.Errorf("the collector or its supervisor outlived the scope's stop: %s", j.state())
	} else {
		gone = time.Since(start)
	}
	t.Logf("collector and supervisor gone %.1f s after the stop; 5 s later: %s", gone.Seconds(), func() string { time.Sleep(5 * time.Second); return j.state() }())
	groupAfterStop := groupProcs(j.group)
	if groupAfterStop != "gone" && groupAfterStop != "[]" {
		t.Errorf("processes left in the group after the scope's stop: %s", groupAfterStop)
	}

	// slurmd made the scope at its start: restart it (an admin's step after
	// stopping the scope), then the job must end and the node come back.
	if out, err := run("systemctl", "restart", "slurmd"); err != nil {
		t.Fatalf("systemctl restart slurmd: %v %s", err, out)
	}
	if !waitFor(patience, func() bool {
		s, _ := run("squeue", "-h", "-o", "%i", "-j", j.id)
		return strings.TrimSpace(s) == ""
	}) {
		t.Logf("job %s still queued after slurmd's restart: %s; scancel", j.id, j.state())
		_, _ = run("scancel", j.id)
		waitJobsGone(t, []string{j.id})
	}
	how := nodeBack(t)
	t.Logf("after slurmd's restart (%s): %s", how, j.state())
	if !exists(j.scope) {
		t.Errorf("slurmd's restart did not make the scope %s again", j.scope)
	}
	afterRestart := fmt.Sprintf("group %s, record %v", groupProcs(j.group), exists(filepath.Join(recordDir, node, j.id)))

	next := followUp(t, "scope-stop-next")
	nothingLeft(t, j.id, j.group)
	nothingLeft(t, next, "/sys/fs/cgroup/"+groupPath(t, next))
	t.Logf("after the follow-up job %s: %s", next, j.state())
	t.Logf("job %s: slurmd stop left it running; scope stop: systemctl returned in %.1f s, collector gone in %.1f s, group right after: %s; after slurmd's restart: %s; after job %s: nothing left\nslurmd on job %s's cleanup:\n%s",
		j.id, stopped.Seconds(), gone.Seconds(), groupAfterStop, afterRestart, next, j.id, cleanupLines(slurmd(t), j.id))
}

// TestRebootMidJob is the first half of the reboot test (run.sh runs it
// with GYM_VM_PHASE=reboot after the suite, record_dir=/var/lib/gym-otel):
// a flagged job runs with its collector in its group and its record on
// disk; the test writes what it saw to GYM_VM_REBOOT_INFO and returns;
// run.sh then syncs and resets the guest hard (sysrq b).
func TestRebootMidJob(t *testing.T) {
	if os.Getenv("GYM_VM_PHASE") != "reboot" {
		t.Skip("run by run.sh before its hard reset (GYM_VM_PHASE=reboot)")
	}
	info := os.Getenv("GYM_VM_REBOOT_INFO")
	waitIdle(t)
	j := startWaitingJob(t, "reboot")
	rec := filepath.Join(recordDir, node, j.id, contract.RecordFile)
	var fi os.FileInfo
	if !waitFor(time.Minute, func() bool { var err error; fi, err = os.Stat(rec); return err == nil }) {
		t.Fatalf("job %s: no record at %s", j.id, rec)
	}
	// The sweep takes a record last written over a minute before the boot
	// as over without asking slurmctld: the reset comes 70 s after it.
	for time.Since(fi.ModTime()) < 70*time.Second {
		time.Sleep(time.Second)
		if f, err := os.Stat(rec); err == nil {
			fi = f
		}
	}
	bootID, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	t.Logf("before the reset: %s", j.state())
	s := fmt.Sprintf("job=%s\ndir=%s\ngroup=%s\nscope=%s\npid=%d\nboot_id=%s\nrecord_mtime=%s\nreset_unix=%d\n",
		j.id, j.dir, j.group, j.scope, j.pid, strings.TrimSpace(string(bootID)), fi.ModTime().UTC().Format(time.RFC3339), time.Now().Unix())
	if err := os.WriteFile(info, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestAfterReboot is the second half (GYM_VM_PHASE=after-reboot, after
// the hard reset, slurmctld and slurmd started): a new boot; no collector,
// supervisor or plugin group of the job the reset ended; the node comes
// back (ReturnToService=2) and the job is over; the record the reset left
// on disk is removed by the next flagged job's prolog sweep (a record
// written before the boot is over without asking slurmctld) or by an
// epilog, and then nothing of either job is left and the node is idle.
func TestAfterReboot(t *testing.T) {
	if os.Getenv("GYM_VM_PHASE") != "after-reboot" {
		t.Skip("run by run.sh after its hard reset (GYM_VM_PHASE=after-reboot)")
	}
	b, err := os.ReadFile(os.Getenv("GYM_VM_REBOOT_INFO"))
	if err != nil {
		t.Fatalf("what the first boot left: %v", err)
	}
	kv := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			kv[k] = v
		}
	}
	pid, _ := strconv.Atoi(kv["pid"])
	j := runningJob{id: kv["job"], dir: kv["dir"], group: kv["group"], scope: kv["scope"], pid: pid}
	bootID, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if strings.TrimSpace(string(bootID)) == kv["boot_id"] {
		t.Fatalf("the same boot id %s: the guest did not reboot", kv["boot_id"])
	}
	rec := filepath.Join(recordDir, node, j.id)
	t.Logf("after the reset, slurmd just started (90 s after slurmctld): %s", j.state())
	if len(userProcs("otelcol-gym")) > 0 || len(userProcs("supervise --from-env")) > 0 {
		t.Errorf("a collector or supervisor runs after the reboot: %v %v", userProcs("otelcol-gym"), userProcs("supervise --from-env"))
	}
	if exists(j.group) {
		t.Errorf("job %s: its group %s exists after the reboot", j.id, j.group)
	}
	recAtBoot := exists(rec)

	start := time.Now()
	ended := func() bool {
		s, _ := run("squeue", "-h", "-o", "%i", "-j", j.id)
		return strings.TrimSpace(s) == ""
	}
	if !waitFor(2*time.Minute, ended) {
		// slurmctld ends a job missing on a rebooted node at a
		// registration of slurmd's: one more, as a restart makes.
		t.Logf("job %s still in squeue 2 min after slurmd's start: %s; systemctl restart slurmd", j.id, j.state())
		if out, err := run("systemctl", "restart", "slurmd"); err != nil {
			t.Fatalf("systemctl restart slurmd: %v %s", err, out)
		}
		if !waitFor(patience, ended) {
			t.Fatalf("job %s still in squeue after the reboot and slurmd's restart: %s", j.id, j.state())
		}
	}
	t.Logf("job %s out of squeue %.1f s after the test's start: %s", j.id, time.Since(start).Seconds(), j.state())
	how := nodeBack(t)
	t.Logf("node back (%s) %.1f s after the test's start: %s", how, time.Since(start).Seconds(), j.state())
	recBeforeNext := exists(rec)

	next := followUp(t, "reboot-next")
	log := slurmd(t)
	nothingLeft(t, j.id, j.group)
	nothingLeft(t, next, "/sys/fs/cgroup/"+groupPath(t, next))
	// Job records are <record_dir>/<node>/<job id>; the node's dot files
	// (the once-per-node warnings' markers) are not.
	if left, _ := filepath.Glob(filepath.Join(recordDir, node, "[0-9]*")); len(left) > 0 {
		t.Errorf("records left: %v", left)
	}
	swept := ""
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "job "+next+": removed the stale record of job "+j.id) {
			swept = l
		}
	}
	t.Logf("record of job %s: on disk at boot %v, before the follow-up job %s %v; swept by its prolog: %q", j.id, recAtBoot, next, recBeforeNext, swept)
	t.Logf("slurmd on the follow-up job %s:\n%s", next, jobLines(log, next))
	t.Logf("slurmd on job %s after the reboot:\n%s", j.id, cleanupLines(log, j.id))
	t.Logf("reset at %s, follow-up job done at %s", kv["reset_unix"], strconv.FormatInt(time.Now().Unix(), 10))
}
