package plugin_test

// Hostile users, on real Slurm: a "collector" (otel.binary) that leaves a
// setsid daemon ignoring SIGTERM and a double-forked one, holds memory past
// the job's bound, and reports what it was given (descriptors, limits,
// no_new_privs, oom_score_adj, cgroup); a pinned key set by the user; a
// spec forged by hand through SLURM_SPANK_* without the plugin. Run with
// Slurm's proctrack/linuxproc (no Slurm cgroups) and with proctrack/cgroup
// + task/cgroup (cgroup v1, PrologFlags=Alloc,Contain).

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
	"github.com/gym-otel-spank/gym-otel-spank/internal/slurmkit"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// hostileBinary writes an otel.binary that, on each node, records what it
// was started with into dir/<node>.*, leaves a setsid daemon and a
// double-forked process that both ignore SIGTERM, starts a memory hog after
// hogDelay (0: none) holding hogBytes, and then runs the real collector.
// The hog is tail(1) reading hogBytes of NULs from a pipe: with no newline
// it keeps every byte, so it reaches any bound within a second, and it
// exits by itself once it holds them all. Its exit status goes to
// dir/<node>.hogexit: 0 when it held hogBytes, 137 when it was killed.
func hostileBinary(t *testing.T, dir string, hogBytes int64, hogDelay int) string {
	t.Helper()
	col := testenv.Collector(t)
	hog := ""
	if hogBytes > 0 {
		hog = fmt.Sprintf(`(sleep %d; head -c %d /dev/zero | tail >/dev/null; echo $? > "$d/$n.hogexit.tmp"; mv "$d/$n.hogexit.tmp" "$d/$n.hogexit") </dev/null >/dev/null 2>&1 &`, hogDelay, hogBytes)
	}
	p := filepath.Join(dir, "hostile-collector")
	body := fmt.Sprintf(`#!/bin/sh
case "$1" in --version) exec %[1]s --version ;; esac
d=%[2]s
n=$(basename "$(pwd -P)") # the collector's working dir is its output dir
ls -l /proc/$$/fd/ > "$d/$n.fds"
cat /proc/$$/status > "$d/$n.status"
cat /proc/$$/limits > "$d/$n.limits"
cat /proc/$$/oom_score_adj > "$d/$n.oom"
cat /proc/$$/cgroup > "$d/$n.cgroup"
( exec 3<>"$d/nvidia0" ) 2> "$d/$n.gpu"; echo "exit $?" >> "$d/$n.gpu"
setsid sh -c 'trap "" TERM; echo $$ > "$0"; exec sleep 1000' "$d/$n.daemon.pid" </dev/null >/dev/null 2>&1 &
( sh -c 'trap "" TERM; echo $$ > "$0"; exec sleep 1000' "$d/$n.dfork.pid" </dev/null >/dev/null 2>&1 & )
%[3]s
exec %[1]s "$@"
`, col, dir, hog)
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// markerDir makes a directory gymuser (the hostile binary) can write.
func markerDir(t *testing.T, name string) string {
	t.Helper()
	d := filepath.Join(jobsDir, name+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := os.Mkdir(d, 0o777); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(d, 0o777)
	return d
}

// waitGone waits (bounded) until none of pids lives, failing otherwise.
func waitGone(t *testing.T, within time.Duration, what string, pids []int) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var alive []int
		for _, pid := range pids {
			if slurmkit.Alive(pid) {
				alive = append(alive, pid)
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still alive %v after the job", what, alive)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	waitFile(t, 20*time.Second, path)
	for i := 0; i < 500; i++ {
		b, _ := os.ReadFile(path)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return pid
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: no pid", path)
	return 0
}

// TestHostileCollector runs the hostile binary as otel.binary in a two-node
// job, under each containment configuration of Slurm.
func TestHostileCollector(t *testing.T) {
	for _, mode := range []struct {
		name string
		up   []string
		// bound is the collector cgroup's memory bound in MiB: the job's
		// --mem of 300 MiB where Slurm counts memory (it tells steps
		// S_JOB_ALLOC_MEM), else the cap of 2 x memory_limit_mib=160.
		bound int64
	}{
		{"linuxproc", nil, 320},
		{"cgroup", []string{"--cgroup", "--prolog-flags", "Alloc,Contain"}, 300},
	} {
		t.Run(mode.name, func(t *testing.T) {
			withCluster(t, mode.up...)
			waitIdle(t)
			hostileJob(t, mode.bound)
		})
	}
}

func hostileJob(t *testing.T, boundMiB int64) {
	d := markerDir(t, "hostile")
	// A GPU-like device the job was not given: NVIDIA's major, minor 0.
	// No driver has the major here: an open allowed fails ENXIO ("No such
	// device or address"), one denied by the group EPERM.
	if err := unix.Mknod(filepath.Join(d, "nvidia0"), unix.S_IFCHR|0o666, int(unix.Mkdev(195, 0))); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(filepath.Join(d, "nvidia0"), 0o666)
	bin := hostileBinary(t, d, 1200<<20, 3)
	// The script ends once both nodes' hogs have ended (killed or not),
	// whatever the machine's load; 3 minutes is a bound, not a length.
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf(
		"srun -N2 sh -c 'grep Cpus_allowed_list /proc/self/status > %[1]s/cpus.$SLURMD_NODENAME'\n"+
			"for i in $(seq 1800); do [ -s %[1]s/otel.hogexit ] && [ -s %[1]s/gn2.hogexit ] && break; sleep 0.1; done\necho done\n", d))
	r := asUser(t, 300*time.Second, tokenEnv(), fmt.Sprintf("sbatch --wait -N2 --mem=300M --gym-otel=binary=%s,memory_limit_mib=160,job_dir=%s/run -o %s.out %s",
		bin, d, d, script))
	if r.code != 0 {
		out, _ := os.ReadFile(d + ".out")
		t.Fatalf("exit %d; stderr %s\n%s", r.code, r.stderr, out)
	}
	jobID := jobIDOf(t, r)
	pid1, _ := os.ReadFile("/proc/1/limits")
	nodeLimits, err := proc.ParseLimits(string(pid1))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for i, node := range []string{"gn1", "gn2"} {
		// The binary runs in its output dir: otel on the first node,
		// nodes/<node> on the others.
		leaf, outDir := "otel", filepath.Join(d, "run", "otel")
		if i > 0 {
			leaf, outDir = node, filepath.Join(outDir, "nodes", node)
		}
		n := filepath.Join(d, leaf)
		pids = append(pids, readPid(t, n+".daemon.pid"), readPid(t, n+".dfork.pid"))
		// ls -l of the binary's own descriptors: 0-2, its output dir
		// (fd 3, held by the supervisor: the base of its files' paths),
		// and the shell's descriptor of its script; never the report
		// pipe or anything else of root's.
		// (dash keeps its script open, and a saved copy of a descriptor
		// it redirects: those point at the script and at fd 2's file.)
		fds, _ := os.ReadFile(n + ".fds")
		targets := map[int]string{}
		for _, m := range regexp.MustCompile(`(?m) (\d+) -> (.*)$`).FindAllStringSubmatch(string(fds), -1) {
			fd, _ := strconv.Atoi(m[1])
			targets[fd] = m[2]
		}
		for fd, to := range targets {
			if fd > 2 && !strings.HasSuffix(to, "/hostile-collector") && to != targets[2] && (fd != 3 || to != outDir) {
				t.Errorf("%s: the user's binary inherited fd %d -> %s", node, fd, to)
			}
		}
		if targets[3] != outDir {
			t.Errorf("%s: fd 3 -> %q, want the output dir %s", node, targets[3], outDir)
		}
		if !strings.Contains(string(fds), " 0 -> ") {
			t.Errorf("%s: no descriptor listing: %q", node, fds)
		}
		status, _ := os.ReadFile(n + ".status")
		if !regexp.MustCompile(`(?m)^NoNewPrivs:\s+1$`).Match(status) {
			t.Errorf("%s: no_new_privs not set on the collector", node)
		}
		if oom, _ := os.ReadFile(n + ".oom"); strings.TrimSpace(string(oom)) != "0" {
			t.Errorf("%s: oom_score_adj %q, want 0", node, oom)
		}
		lim, _ := os.ReadFile(n + ".limits")
		got, err := proc.ParseLimits(string(lim))
		if err != nil {
			t.Fatalf("%s: %v", node, err)
		}
		for _, res := range []int{unix.RLIMIT_MEMLOCK, unix.RLIMIT_STACK, unix.RLIMIT_NOFILE, unix.RLIMIT_NPROC} {
			if g, w := got[res], nodeLimits[res]; g.Cur > w.Cur || g.Max > w.Max {
				t.Errorf("%s: resource %d is %+v, above the node's %+v", node, res, g, w)
			}
		}
		if c := got[unix.RLIMIT_CORE]; c.Cur != 0 || c.Max != 0 {
			t.Errorf("%s: core dumps not off: %+v", node, c)
		}
		cg, _ := os.ReadFile(n + ".cgroup")
		want := "gym_otel/" + clusterName() + "/" + node + "/job_" + jobID
		for _, ctrl := range []string{"memory", "pids", "freezer", "devices", ""} {
			if !regexp.MustCompile(`(?m)^\d+:` + ctrl + `:/` + regexp.QuoteMeta(want) + `$`).Match(cg) {
				t.Errorf("%s: the collector is not in %s:/%s:\n%s", node, ctrl, want, cg)
			}
		}
		// The v1 devices list and the v2 group's device program both deny
		// it (helper/cgroup's TestDeviceProgram checks the program alone).
		if gpu, _ := os.ReadFile(n + ".gpu"); !strings.Contains(string(gpu), "Operation not permitted") || !strings.Contains(string(gpu), "exit 2") {
			t.Errorf("%s: the user's binary opening a GPU device (195:0) the job was not given: %q, want EPERM", node, gpu)
		}
		switch b, err := os.ReadFile(n + ".hogexit"); {
		case err != nil:
			t.Errorf("%s: the memory hog never ended: %v", node, err)
		case strings.TrimSpace(string(b)) == "0":
			t.Errorf("%s: a process held 1200 MiB in the collector's cgroup: no bound", node)
		case strings.TrimSpace(string(b)) != "137":
			t.Errorf("%s: the memory hog exited %s, want 137 (SIGKILL by the OOM killer)", node, strings.TrimSpace(string(b)))
		}
	}
	// Nothing of the user's survives the job, on either node.
	waitGone(t, patience, "the setsid and double-forked children", pids)
	waitNoCollector(t)
	if left := userProcs("sleep 1000"); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	waitIdle(t)
	log := slurmdLogs(t)
	// The CPUs the job's steps ran on, per node (all of them where Slurm
	// binds nothing).
	stepCPUs := map[string]string{}
	allCPUs := fmt.Sprintf("0-%d", runtime.NumCPU()-1)
	for _, node := range []string{"gn1", "gn2"} {
		b, _ := os.ReadFile(filepath.Join(d, "cpus."+node))
		stepCPUs[node] = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(b)), "Cpus_allowed_list:"))
	}
	for _, node := range []string{"gn1", "gn2"} {
		re := regexp.MustCompile(`job ` + jobID + `: collector cgroup gym_otel/` + clusterName() + `/` + node + `/job_` + jobID +
			`: peak memory ([0-9.]+) MiB \(bound ([0-9]+) MiB\), CPU ([0-9.]+) s, (\d+) OOM kills, CPUs (\S*)`)
		m := re.FindStringSubmatch(log)
		if m == nil {
			t.Errorf("%s: no cgroup cost line for job %s in slurmd's log", node, jobID)
			continue
		}
		peak, _ := strconv.ParseFloat(m[1], 64)
		bound, _ := strconv.ParseInt(m[2], 10, 64)
		t.Logf("%s: collector cgroup peak %.1f MiB, bound %d MiB, CPU %s s, OOM kills %s, CPUs %s (the job's steps: %s)", node, peak, bound, m[3], m[4], m[5], stepCPUs[node])
		if want := stepCPUs[node]; want != "" && want != allCPUs && m[5] != want {
			t.Errorf("%s: the collector's CPUs are %s, not the job's %s", node, m[5], want)
		}
		if bound != boundMiB {
			t.Errorf("%s: the collector's cgroup bound is %d MiB, want %d MiB", node, bound, boundMiB)
		}
		if peak < 20 || peak > float64(bound) {
			t.Errorf("%s: peak %.1f MiB: the collector's memory is not charged to its cgroup within the bound", node, peak)
		}
		if m[4] == "0" {
			t.Errorf("%s: the memory hog was not OOM-killed in the collector's cgroup", node)
		}
		if !regexp.MustCompile(`job ` + jobID + `: killed \d+ processes left in the collector's cgroup gym_otel/` + clusterName() + `/` + node).MatchString(log) {
			t.Errorf("%s: the epilog did not report killing the leftovers", node)
		}
	}
	// The drain stayed clean: the collector's files are complete.
	jsonlLines(t, filepath.Join(d, "run", "otel"))
	jsonlLines(t, filepath.Join(d, "run", "otel", "nodes", "gn2"))
}

// withPinnedSite rewrites the site file (read by sbatch and by every
// node's prolog) with extra appended, restoring it at the end.
func withPinnedSite(t *testing.T, extra string) {
	t.Helper()
	p := filepath.Join(plugDir, "site.yaml")
	old, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, append(append([]byte{}, old...), extra...), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.WriteFile(p, old, 0o644) })
}

// TestPinnedBinary: with binary pinned by the site, a user's binary at
// submit and a binary in a spec forged without the plugin are both
// replaced by the pinned one on the nodes.
func TestPinnedBinary(t *testing.T) {
	waitIdle(t)
	withPinnedSite(t, "pinned: [binary, container, container_runtime]\n")
	d := markerDir(t, "pinned")
	bin := hostileBinary(t, d, 0, 0)
	script := writeScript(t, filepath.Base(d)+".sh", "echo ok\n")
	r := asUser(t, 90*time.Second, tokenEnv(), fmt.Sprintf("sbatch --wait --gym-otel=binary=%s,job_dir=%s/run -o %s.out %s", bin, d, d, script))
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, `otel.binary is pinned by the site to "`+testenv.Collector(t)+`": the value "`+bin+`" (--gym-otel) is not used`) {
		t.Errorf("no pin notice at submit: %q", r.stderr)
	}
	jsonlLines(t, filepath.Join(d, "run", "otel"))
	// A spec forged by hand: srun without --gym-otel, with the job-control
	// variables set through SLURM_SPANK_* (libslurm forwards them).
	forged := &config.Resolved{Version: config.EncodedVersion, Otel: config.Defaults(), JobDir: d + "/forged"}
	forged.Otel.Endpoint, forged.Otel.ServiceName, forged.Otel.Binary = "http://127.0.0.1:"+backendPort, "forged", bin
	forged.Otel.GPUMetricsPort, forged.Otel.NodeMetricsPort = 0, 0
	enc, err := forged.Encode()
	if err != nil {
		t.Fatal(err)
	}
	forge := buildForge(t, d)
	r = asUser(t, 30*time.Second, nil, fmt.Sprintf("%s %s %s %s/forged.out gn1", forge, enc, d, d))
	if r.code != 0 {
		t.Fatalf("forge: exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	forgedID := jobIDOf(t, r)
	waitFile(t, 60*time.Second, d+"/forged.out")
	waitNoCollector(t)
	waitIdle(t)
	if ents, _ := filepath.Glob(filepath.Join(d, "*.daemon.pid")); len(ents) > 0 {
		t.Errorf("the user's binary ran although binary is pinned: %v", ents)
	}
	if !regexp.MustCompile(`job ` + forgedID + `: otel\.binary: the job's value "` + regexp.QuoteMeta(bin) + `" is not this node's pinned`).MatchString(slurmdLogs(t)) {
		t.Errorf("the prolog did not log the forged binary it replaced")
	}
	jsonlLines(t, filepath.Join(d, "forged", "otel"))
}
