package plugin_test

// Containment that cannot be lost or bypassed, on real Slurm: many short
// jobs started and ended at once on one node (every collector in its
// group), a forged spec with out-of-range values (refused by name), a
// memory bound lowered below what the group holds (enforced, never
// ignored), and a process moved out of the plugin's group into the job's
// own step cgroup (killed at the job's end).

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/cgroup"
	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// recorderBinary writes an otel.binary that saves its own /proc/<pid>/cgroup
// into the output dir (proc-cgroup) and then execs the real collector, so
// the file is the collector's place when it started.
func recorderBinary(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "recorder-collector")
	body := fmt.Sprintf(`#!/bin/sh
case "$1" in --version) exec %[1]s --version ;; esac
cat /proc/$$/cgroup > "$(pwd -P)/proc-cgroup" # the collector runs in its output dir
exec %[1]s "$@"
`, testenv.Collector(t))
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// nodeHierarchies are the writable cgroup hierarchies of this host (the
// test nodes share it).
func nodeHierarchies(t *testing.T) []cgroup.Hierarchy {
	t.Helper()
	hs, err := cgroup.Discover("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if hs = cgroup.Writable(hs); len(hs) == 0 {
		testenv.Missing(t, "a writable cgroup hierarchy")
	}
	return hs
}

// inGroup reports which hierarchies of hs the /proc/<pid>/cgroup text
// procCgroup does not place in rel ("" when all do).
func notInGroup(hs []cgroup.Hierarchy, procCgroup, rel string) string {
	var miss []string
	for _, h := range hs {
		var re *regexp.Regexp
		if h.Version == cgroup.V2 {
			re = regexp.MustCompile(`(?m)^0::/` + regexp.QuoteMeta(rel) + `$`)
		} else {
			re = regexp.MustCompile(`(?m)^\d+:([^:]*,)?` + regexp.QuoteMeta(h.Controllers[0]) + `(,[^:]*)?:/` + regexp.QuoteMeta(rel) + `$`)
		}
		if !re.MatchString(procCgroup) {
			miss = append(miss, h.Mount)
		}
	}
	return strings.Join(miss, " ")
}

// TestManyShortJobsContained: 16 short --gym-otel jobs submitted at once
// to one node with 8 CPUs: two waves, the first wave's epilogs removing
// their groups while the second wave's prologs create theirs. Every
// collector must start, and start inside its own group on every
// hierarchy; nothing may be left.
func TestManyShortJobsContained(t *testing.T) {
	waitIdle(t)
	hs := nodeHierarchies(t)
	d := markerDir(t, "many")
	bin := recorderBinary(t, d)
	script := writeScript(t, filepath.Base(d)+".sh", "true\n")
	const jobs = 16
	r := asUser(t, 60*time.Second, tokenEnv(), fmt.Sprintf(
		`for i in $(seq %d); do sbatch -w gn1 -n1 --gym-otel=binary=%s,job_dir=%s/run-%%j -o %s/%%j.out %s || exit 1; done`,
		jobs, bin, d, d, script))
	if r.code != 0 {
		t.Fatalf("sbatch: exit %d: %s", r.code, r.stderr)
	}
	ids := regexp.MustCompile(`Submitted batch job (\d+)`).FindAllStringSubmatch(r.stdout, -1)
	if len(ids) != jobs {
		t.Fatalf("%d jobs submitted: %s", len(ids), r.stdout)
	}
	var idList []string
	for _, m := range ids {
		idList = append(idList, m[1])
	}
	waitJobsGone(t, 180*time.Second, idList)
	waitNoCollector(t)
	waitIdle(t)
	log := slurmdLogs(t)
	contained, outside, missing := 0, 0, 0
	for _, id := range idList {
		rel := "gym_otel/" + clusterName() + "/gn1/job_" + id
		pc, err := os.ReadFile(filepath.Join(d, "run-"+id, "otel", "proc-cgroup"))
		if err != nil {
			missing++
			t.Errorf("job %s: the collector never started: %v", id, err)
			continue
		}
		if miss := notInGroup(hs, string(pc), rel); miss != "" {
			outside++
			t.Errorf("job %s: the collector started outside its group %s in %s:\n%s", id, rel, miss, pc)
		} else {
			contained++
		}
		if !regexp.MustCompile(`job ` + id + `: collector ready on gn1 \(.*, cgroup ` + regexp.QuoteMeta(rel) + `\)`).MatchString(log) {
			t.Errorf("job %s: no ready line naming its cgroup in slurmd's log", id)
		}
		if strings.Contains(log, "job "+id+": no cgroup for the collector") {
			t.Errorf("job %s: ran without a cgroup", id)
		}
		for _, h := range hs {
			if _, err := os.Stat(filepath.Join(h.Mount, rel)); err == nil {
				t.Errorf("job %s: its group is left in %s", id, h.Mount)
			}
		}
	}
	retried := regexp.MustCompile(`job (\d+): the collector's cgroup \S+ was made at attempt`).FindAllString(log, -1)
	t.Logf("%d short jobs at once on gn1: %d collectors in their group on all %d hierarchies, %d outside, %d never started; %d creates retried",
		jobs, contained, len(hs), outside, missing, len(retried))
}

// TestForgedValuesRefused: a spec set by hand through libslurm (no plugin
// at submit) with a memory_limit_mib of 0, and one so large that its
// bound would overflow, never starts a collector without a bound: each
// node's prolog refuses the value by name and the job runs without one.
func TestForgedValuesRefused(t *testing.T) {
	waitIdle(t)
	d := markerDir(t, "forgedvalues")
	bin := recorderBinary(t, d)
	forge := buildForge(t, d)
	for _, c := range []struct {
		mib  int
		want string
	}{
		{0, "otel.memory_limit_mib: 0 is out of range 32..65536"},
		{1 << 50, "otel.memory_limit_mib: 1125899906842624 is out of range 32..65536"},
	} {
		forged := &config.Resolved{Version: config.EncodedVersion, Otel: config.Defaults(), JobDir: fmt.Sprintf("%s/run-%d", d, c.mib)}
		forged.Otel.Endpoint, forged.Otel.ServiceName, forged.Otel.Binary = "http://127.0.0.1:"+backendPort, "forged", bin
		forged.Otel.GPUMetricsPort, forged.Otel.NodeMetricsPort = 0, 0
		forged.Otel.MemoryLimitMiB = c.mib
		enc, err := forged.Encode()
		if err != nil {
			t.Fatal(err)
		}
		out := fmt.Sprintf("%s/forged-%d.out", d, c.mib)
		r := asUser(t, 30*time.Second, nil, fmt.Sprintf("%s %s %s %s gn1", forge, enc, d, out))
		if r.code != 0 {
			t.Fatalf("forge: exit %d: %s %s", r.code, r.stdout, r.stderr)
		}
		id := jobIDOf(t, r)
		waitJobsGone(t, 60*time.Second, []string{id})
		waitFile(t, 10*time.Second, out)
		log := slurmdLogs(t)
		if !regexp.MustCompile(`job ` + id + `: .*` + regexp.QuoteMeta(c.want)).MatchString(log) {
			t.Errorf("memory_limit_mib=%d: the prolog did not refuse it by name (%q) in slurmd's log", c.mib, c.want)
		}
		if strings.Contains(log, "job "+id+": collector ready") {
			t.Errorf("memory_limit_mib=%d: a collector started", c.mib)
		}
		if _, err := os.Stat(filepath.Join(forged.JobDir, "otel", "proc-cgroup")); err == nil {
			t.Errorf("memory_limit_mib=%d: the forged binary ran", c.mib)
		}
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, "job "+id+":") {
				t.Logf("slurmd: %s", line)
			}
		}
	}
	waitNoCollector(t)
	waitIdle(t)
}

// hogBinary writes an otel.binary that, before it execs the real
// collector, makes a process of its group hold holdMiB of anonymous memory
// (tail buffering a pipe that never ends) and records its pid in the
// output dir (hog.pid): the group holds that much once the collector is
// ready.
func hogBinary(t *testing.T, dir string, holdMiB int) string {
	t.Helper()
	p := filepath.Join(dir, "hog-collector")
	body := fmt.Sprintf(`#!/bin/sh
case "$1" in --version) exec %[1]s --version ;; esac
o=$(pwd -P) # the collector runs in its output dir
(head -c %[2]dM /dev/zero; exec sleep 1000) | tail -c %[2]dM &
h=$!
echo $h > "$o/hog.pid"
i=0
while [ "$(awk '/^VmRSS/ {print $2}' /proc/$h/status 2>/dev/null || echo 0)" -lt %[3]d ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
exec %[1]s "$@"
`, testenv.Collector(t), holdMiB, holdMiB*1000)
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMemoryBoundEnforced, on Slurm's cgroup containment (cgroup v1,
// CR_CPU_Memory, PrologFlags=Alloc,Contain) with the site's cap
// cgroup_memory_max_mib=600: a job without --mem gets the cap, not
// 2 x memory_limit_mib; a job with --mem=300M whose group holds 450 MiB of
// anonymous memory when Slurm first tells the job's memory (the kernel
// refuses the lower bound: EBUSY) has the group's processes killed and
// the bound in force, and slurmd's log says so.
func TestMemoryBoundEnforced(t *testing.T) {
	capConf := filepath.Join(os.TempDir(), "gym-otel"+instance+"-cap.conf")
	if err := os.WriteFile(capConf, []byte(strings.TrimSuffix(goodConf, "\n")+" cgroup_memory_max_mib=600\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := clusterConf
	clusterConf = capConf
	err := upCluster("--cgroup", "--prolog-flags", "Alloc,Contain")
	clusterConf = old
	t.Cleanup(func() {
		_ = os.Remove(capConf)
		if err := upCluster(); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	waitIdle(t)
	d := markerDir(t, "bound")
	cost := func(log, id string) string {
		m := regexp.MustCompile(`job ` + id + `: collector cgroup \S+: peak memory [0-9.]+ MiB \(bound ([0-9]+) MiB\)`).FindStringSubmatch(log)
		if m == nil {
			return ""
		}
		return m[1]
	}

	// The cap.
	script := writeScript(t, filepath.Base(d)+"-cap.sh", "true\n")
	r := asUser(t, 90*time.Second, tokenEnv(), fmt.Sprintf("sbatch --wait -w gn1 --gym-otel=memory_limit_mib=512,job_dir=%s/cap -o %s/cap.out %s", d, d, script))
	if r.code != 0 {
		t.Fatalf("cap job: exit %d: %s", r.code, r.stderr)
	}
	capID := jobIDOf(t, r)
	log := slurmdLogs(t)
	if !strings.Contains(log, "job "+capID+": the collector's cgroup is bounded at the site's cap, 600 MiB") {
		t.Errorf("no cap line for job %s", capID)
	}
	if b := cost(log, capID); b != "600" {
		t.Errorf("job %s (no --mem, memory_limit_mib=512, cap 600): the group's bound was %q MiB, want 600", capID, b)
	}

	// The job's memory, below what the group holds.
	bin := hogBinary(t, d, 450)
	script = writeScript(t, filepath.Base(d)+"-hog.sh", fmt.Sprintf(`h=$(cat %[1]s/hog/otel/hog.pid)
i=0; while kill -0 "$h" 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
if kill -0 "$h" 2>/dev/null; then echo alive; else echo gone; fi > %[1]s/hog.state
`, d))
	r = asUser(t, 120*time.Second, tokenEnv(), fmt.Sprintf("sbatch --wait -w gn1 --mem=300M --gym-otel=binary=%s,memory_limit_mib=512,job_dir=%s/hog -o %s/hog.out %s", bin, d, d, script))
	if r.code != 0 {
		out, _ := os.ReadFile(d + "/hog.out")
		t.Fatalf("hog job: exit %d: %s\n%s", r.code, r.stderr, out)
	}
	hogID := jobIDOf(t, r)
	waitNoCollector(t)
	waitIdle(t)
	log = slurmdLogs(t)
	if st, _ := os.ReadFile(d + "/hog.state"); strings.TrimSpace(string(st)) != "gone" {
		t.Errorf("the process holding 450 MiB in a group bounded to the job's 300 MiB was %q during the job, want gone", strings.TrimSpace(string(st)))
	}
	re := regexp.MustCompile(`job ` + hogID + `: bounding the collector's cgroup by the job's memory \(300 MiB, [^)]*\): the group held (\d+) MiB, above the job's 300 MiB, and the kernel could not reclaim it \(EBUSY after \d+ steps\): killed its (\d+) processes`)
	if m := re.FindStringSubmatch(log); m == nil {
		t.Errorf("no kill line for job %s in slurmd's log", hogID)
	} else {
		t.Logf("job %s: the group held %s MiB above the job's 300 MiB: %s processes killed", hogID, m[1], m[2])
	}
	if b := cost(log, hogID); b != "300" {
		t.Errorf("job %s: the group's bound was %q MiB at the end, want the job's 300", hogID, b)
	}
	if left := userProcs("sleep 1000"); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestMovedOutKilled, on Slurm's cgroup containment (cgroup v1,
// proctrack/cgroup, task/cgroup, PrologFlags=Alloc,Contain): the
// collector leaves a setsid child ignoring SIGTERM, and the job's batch
// script (the same user) moves that child into its own step cgroup in
// every hierarchy where it can: Slurm's cgroup/v1 chowns the step's
// directories to the user (not their cgroup.procs), so the script makes
// a group of its own inside and moves the child there. It can leave the
// plugin's group in the hierarchies where Slurm made it a directory,
// never in pids or the v2 one; the epilog kills it there, and nothing
// survives the job.
func TestMovedOutKilled(t *testing.T) {
	withCluster(t, "--cgroup", "--prolog-flags", "Alloc,Contain")
	waitIdle(t)
	hs := nodeHierarchies(t)
	d := markerDir(t, "moveout")
	bin := filepath.Join(d, "mover-collector")
	if err := os.WriteFile(bin, []byte(fmt.Sprintf(`#!/bin/sh
case "$1" in --version) exec %[1]s --version ;; esac
setsid sh -c 'trap "" TERM; echo $$ > "$0"; exec sleep 1000' "%[2]s/child.pid" </dev/null >/dev/null 2>&1 &
exec %[1]s "$@"
`, testenv.Collector(t), d)), 0o755); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range hs {
		if h.Version == cgroup.V2 {
			names = append(names, h.Mount+"=")
		} else {
			names = append(names, h.Mount+"="+h.Controllers[0])
		}
	}
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf(`d=%[1]s
i=0; while [ ! -s $d/child.pid ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
c=$(cat $d/child.pid)
cat /proc/$c/cgroup > $d/before.cgroup
for hc in %[2]s; do
	h=${hc%%=*}; ctrl=${hc#*=}
	if [ -z "$ctrl" ]; then p=$(sed -n 's/^0:://p' /proc/self/cgroup)
	else p=$(awk -F: -v c="$ctrl" '{n=split($2,a,","); for(i=1;i<=n;i++) if(a[i]==c) print $3}' /proc/self/cgroup); fi
	o=$(stat -c '%%U:%%G %%a' "$h$p" "$h$p/cgroup.procs" 2>/dev/null | tr '\n' ' ')
	if echo $c 2>/dev/null > "$h$p/cgroup.procs"; then echo "moved $h to $p ($o)"
	elif mkdir "$h$p/escape" 2>/dev/null && echo $c 2>/dev/null > "$h$p/escape/cgroup.procs"; then echo "moved $h to $p/escape, a group of its own making ($o)"
	else echo "refused $h $p ($o)"; fi
done > $d/moves
cat /proc/$c/cgroup > $d/after.cgroup
`, d, strings.Join(names, " ")))
	r := asUser(t, 120*time.Second, tokenEnv(), fmt.Sprintf("sbatch --wait -w gn1 --mem=300M --gym-otel=binary=%s,job_dir=%s/run -o %s/job.out %s", bin, d, d, script))
	if r.code != 0 {
		out, _ := os.ReadFile(d + "/job.out")
		t.Fatalf("exit %d: %s\n%s", r.code, r.stderr, out)
	}
	jobID := jobIDOf(t, r)
	u, err := user.Lookup(slurmEnv["GOS_SLURM_USER"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Slurm leaves the job's groups behind when the user made one
		// inside them: remove what is left of this job's, bottom up
		// (rmdir: only empty groups go).
		for _, h := range hs {
			root := filepath.Join(h.Mount, "slurm_gn1", "uid_"+u.Uid, "job_"+jobID)
			var dirs []string
			_ = filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
				if err == nil && e.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			for i := len(dirs) - 1; i >= 0; i-- {
				_ = os.Remove(dirs[i])
			}
		}
	})
	child := readPid(t, d+"/child.pid")
	moves, _ := os.ReadFile(d + "/moves")
	after, _ := os.ReadFile(d + "/after.cgroup")
	t.Logf("job %s: the batch script's moves of the collector's child %d:\n%safter:\n%s", jobID, child, moves, after)
	rel := "gym_otel/" + clusterName() + "/gn1/job_" + jobID
	if !regexp.MustCompile(`(?m)^moved /sys/fs/cgroup/(memory|freezer) `).Match(moves) {
		t.Logf("the user could move the child out of neither the plugin's memory nor its freezer group")
	}
	for _, h := range hs {
		if h.Version != cgroup.V2 && h.Controllers[0] != "pids" {
			continue
		}
		if miss := notInGroup([]cgroup.Hierarchy{h}, string(after), rel); miss != "" {
			t.Errorf("the child left the plugin's group in %s, which the user must not be able to leave:\n%s", h.Mount, after)
		}
	}
	waitGone(t, 30*time.Second, "the moved child", []int{child})
	if regexp.MustCompile(`(?m)^moved `).Match(moves) && !regexp.MustCompile(`job `+jobID+`: killed \d+ processes left in the collector's cgroup`).MatchString(slurmdLogs(t)) {
		t.Errorf("the epilog did not report killing the moved child")
	}
	waitNoCollector(t)
	if left := userProcs("sleep 1000"); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	waitIdle(t)
}

// TestMemoryWindow, on Slurm's cgroup containment (cgroup v1,
// CR_CPU_Memory, PrologFlags=Alloc,Contain), measures the one window in
// which the collector's group is bounded above the job's memory: the job
// prolog starts the collector before Slurm tells the node the job's memory
// (slurmd runs the SPANK job prolog, whose environment and SPANK items
// carry no memory, before it spawns the extern step), so the group starts
// at 2 x memory_limit_mib (under the site's cap); the extern step, the
// first process that knows the job's memory on the node, lowers it before
// any step of the job runs. A --mem=200M job with memory_limit_mib=300:
// the collector starts under 600 MiB, the bound drops to 200 MiB while the
// collector runs, and the batch script's first line already sees 200 MiB.
func TestMemoryWindow(t *testing.T) {
	withCluster(t, "--cgroup", "--prolog-flags", "Alloc,Contain")
	waitIdle(t)
	mount := ""
	for _, h := range nodeHierarchies(t) {
		if h.Version == cgroup.V1 && slices.Contains(h.Controllers, "memory") {
			mount = h.Mount
		}
	}
	if mount == "" {
		testenv.Missing(t, "the cgroup v1 memory controller")
	}
	d := markerDir(t, "window")
	// The collector's binary: its group's bound when it starts, then a
	// watcher in the group that notes when (ms after the start) and to
	// what the bound changes.
	bin := filepath.Join(d, "window-collector")
	body := fmt.Sprintf(`#!/bin/sh
case "$1" in --version) exec %[1]s --version ;; esac
o=$(pwd -P) # the collector runs in its output dir
f=%[2]s$(sed -n 's/^[0-9]*:memory:\(.*\)$/\1/p' /proc/$$/cgroup)/memory.limit_in_bytes
t0=$(date +%%s%%N)
first=$(cat "$f")
echo "$f" > "$o/memcg"
echo "$first" > "$o/bound-at-start"
(i=0; while [ "$(cat "$f")" = "$first" ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done
 echo "$(cat "$f") $(( ($(date +%%s%%N) - t0) / 1000000 ))" > "$o/bound-changed") &
exec %[1]s "$@"
`, testenv.Collector(t), mount)
	if err := os.WriteFile(bin, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf("cat \"$(cat %[1]s/run/otel/memcg)\" > %[1]s/bound-at-script\n", d))
	start := time.Now()
	r := asUser(t, 120*time.Second, tokenEnv(), fmt.Sprintf("sbatch --wait -w gn1 --mem=200M --gym-otel=binary=%s,memory_limit_mib=300,job_dir=%s/run -o %s/job.out %s", bin, d, d, script))
	if r.code != 0 {
		out, _ := os.ReadFile(d + "/job.out")
		t.Fatalf("job: exit %d: %s\n%s", r.code, r.stderr, out)
	}
	id := jobIDOf(t, r)
	waitNoCollector(t)
	waitIdle(t)
	rd := func(p string) string { b, _ := os.ReadFile(p); return strings.TrimSpace(string(b)) }
	atStart, atScript := rd(d+"/run/otel/bound-at-start"), rd(d+"/bound-at-script")
	changed := strings.Fields(rd(d + "/run/otel/bound-changed"))
	t.Logf("job %s (--mem=200M, memory_limit_mib=300, %.1f s): the group's memory.limit_in_bytes %s when the collector started, %v (bound, ms after that start) once the extern step ran, %s at the batch script's first line",
		id, time.Since(start).Seconds(), atStart, changed, atScript)
	if want := strconv.Itoa(600 << 20); atStart != want {
		t.Errorf("the bound when the collector started: %q, want 2 x memory_limit_mib = %s (the prolog knows no job memory)", atStart, want)
	}
	if len(changed) != 2 || changed[0] != strconv.Itoa(200<<20) {
		t.Errorf("the bound while the collector ran changed to %v, want the job's %d", changed, 200<<20)
	}
	if want := strconv.Itoa(200 << 20); atScript != want {
		t.Errorf("the bound at the batch script's first line: %q, want the job's %s (lowered by the extern step before any step runs)", atScript, want)
	}
	if left := userProcs("window-collector"); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}
