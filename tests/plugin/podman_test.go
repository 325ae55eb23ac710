package plugin_test

import (
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestContainerPodmanContained: on real Slurm, a flagged job whose
// collector runs under rootless Podman as the job's user
// (testenv.PodmanRuntime, the image an OCI archive each job loads into its
// own storage: with the single mapping no_new_privs leaves, a layer of
// root's from a shared store cannot be used, see withoutSubIDs). The
// container's collector and Podman's conmon must be in the plugin's group
// of the job on every hierarchy while the job runs; the job's files must
// get its metrics and the drain its state; after the job nothing of the
// runtime may be left (the pause process included) and the group is gone.
func TestContainerPodmanContained(t *testing.T) {
	podman := testenv.Binary(t, "podman")
	runc := testenv.Binary(t, "runc", "/usr/sbin/runc", "/usr/bin/runc")
	waitIdle(t)
	hs := nodeHierarchies(t)
	u, err := user.Lookup(kit.User)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	// The plugin starts the collector with no_new_privs, under which the
	// setuid newuidmap cannot map a user's subordinate ids ("newuidmap:
	// write to uid_map failed: Operation not permitted"): only a user
	// without /etc/subuid and /etc/subgid ranges runs rootless Podman
	// here, its own uid mapped to the container's root alone.
	imgDir, err := os.MkdirTemp("", "gym-otel-podman-image-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(imgDir, 0o755)
	t.Cleanup(func() { os.RemoveAll(imgDir) })
	const image = "localhost/gym-otel-collector:plugin-test"
	_, archive := testenv.PodmanImage(t, podman, imgDir, image)
	top := "/" + strings.Split(strings.TrimPrefix(jobsDir, "/"), "/")[0]

	sitePath := filepath.Join(plugDir, "site.yaml")
	site, err := os.ReadFile(sitePath)
	if err != nil {
		t.Fatal(err)
	}
	withContainer := string(site) + "  container: oci-archive:" + archive + "\n  container_runtime: " + testenv.PodmanRuntime(podman, runc, "", top) + "\n  health_check_timeout_seconds: 60\n"
	withContainer = strings.Replace(withContainer, "  health_check_timeout_seconds: 20\n", "", 1)
	if err := os.WriteFile(sitePath, []byte(withContainer), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile(sitePath, site, 0o644) })

	d := markerDir(t, "podman")
	script := writeScript(t, filepath.Base(d)+".sh", "sleep 8\n")

	// With subordinate ids the start fails, with Podman's reason in
	// state.json, and leaves neither a process nor its {rundir}.
	if hasSubIDs(kit.User) {
		r := asUser(t, 60*time.Second, tokenEnv(), "sbatch -w gn1 -n1 --gym-otel=job_dir="+d+"/run-%j -o "+d+"/%j.out "+script)
		if r.code != 0 {
			t.Fatalf("sbatch: exit %d: %s", r.code, r.stderr)
		}
		id := jobIDOf(t, r)
		waitJobsGone(t, 120*time.Second, []string{id})
		waitNoCollector(t)
		state, _ := os.ReadFile(filepath.Join(d, "run-"+id, "otel", "state.json"))
		if !strings.Contains(string(state), `"status": "failed"`) || !strings.Contains(string(state), "newuidmap") {
			t.Errorf("job %s of a user with subordinate ids: state.json %s; want failed, naming newuidmap", id, state)
		}
		if left, _ := filepath.Glob("/tmp/gym-otel-" + id + "-*"); len(left) > 0 {
			t.Errorf("job %s: {rundir} left after a failed start: %v", id, left)
			for _, l := range left {
				os.RemoveAll(l)
			}
		}
		if left := runtimeLeft(uid); len(left) > 0 {
			t.Errorf("job %s: the runtime's processes outlived a failed start: %q", id, left)
		}
		t.Logf("job %s of a user with subordinate ids: refused (%s)", id, regexp.MustCompile(`newuidmap[^"\\]*`).FindString(string(state)))
	}
	withoutSubIDs(t, kit.User)
	r := asUser(t, 60*time.Second, tokenEnv(), "sbatch -w gn1 -n1 --gym-otel=job_dir="+d+"/run-%j -o "+d+"/%j.out "+script)
	if r.code != 0 {
		t.Fatalf("sbatch: exit %d: %s", r.code, r.stderr)
	}
	id := jobIDOf(t, r)
	out := filepath.Join(d, "run-"+id, "otel")
	rel := "gym_otel/" + clusterName() + "/gn1/job_" + id
	waitFile(t, 60*time.Second, filepath.Join(out, "collector.log"))

	// While the job runs: the container's collector and conmon, in the
	// plugin's group.
	var coll, conmon int
	deadline := time.Now().Add(30 * time.Second)
	for (coll == 0 || conmon == 0) && time.Now().Before(deadline) {
		for _, pid := range uidProcs(uid) {
			c := cmdlineOf(pid)
			switch {
			case strings.HasPrefix(c, "/otelcol-gym\x00--config\x00"+out+"/"):
				coll = pid
			case strings.Contains(c, "conmon"):
				conmon = pid
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if coll == 0 {
		log, _ := os.ReadFile(filepath.Join(out, "collector.log"))
		t.Fatalf("no collector of job %s in a container; collector.log:\n%s\nslurmd:\n%s", id, log, tail(slurmdLogs(t), 20))
	}
	for what, pid := range map[string]int{"the container's collector": coll, "conmon": conmon} {
		if pid == 0 {
			t.Errorf("no %s", what)
			continue
		}
		pc, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
		if miss := notInGroup(hs, string(pc), rel); miss != "" {
			t.Errorf("%s (pid %d) is outside the job's group %s in %s:\n%s", what, pid, rel, miss, pc)
		}
	}
	t.Logf("job %s: the container's collector (pid %d) and conmon (pid %d) in %s", id, coll, conmon, rel)

	waitJobsGone(t, 120*time.Second, []string{id})
	waitNoCollector(t)
	waitIdle(t)
	if left := runtimeLeft(uid); len(left) > 0 {
		t.Errorf("the runtime's processes outlived job %s: %q", id, left)
		for _, p := range left {
			pid, _ := strconv.Atoi(strings.Fields(p)[0])
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	for _, h := range hs {
		if _, err := os.Stat(filepath.Join(h.Mount, rel)); err == nil {
			t.Errorf("job %s: its group is left in %s", id, h.Mount)
		}
	}
	state, _ := os.ReadFile(filepath.Join(out, "state.json"))
	if !strings.Contains(string(state), `"status": "drained"`) {
		t.Errorf("state.json: %s", state)
	}
	if n := jsonlLines(t, out); n["metrics.jsonl"] == 0 {
		t.Errorf("job %s: no metrics in its files: %v", id, n)
	}
	log := slurmdLogs(t)
	ready := regexp.MustCompile(`job ` + id + `: collector ready on gn1 .*`).FindString(log)
	if ready == "" {
		t.Errorf("job %s: no ready line in slurmd's log", id)
	}
	t.Logf("%s", ready)
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "job "+id) && (strings.Contains(l, "stopped in") || strings.Contains(l, "ended what the runtime left")) {
			t.Logf("%s", l)
		}
	}
}

// hasSubIDs reports whether name has a line in /etc/subuid.
func hasSubIDs(name string) bool {
	data, _ := os.ReadFile("/etc/subuid")
	return strings.Contains("\n"+string(data), "\n"+name+":")
}

// withoutSubIDs removes name's lines from /etc/subuid and /etc/subgid for
// the test and puts them back at its end (only where still missing, as
// other users may be added meanwhile).
func withoutSubIDs(t *testing.T, name string) {
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var keep, mine []string
		for _, l := range strings.SplitAfter(string(data), "\n") {
			if strings.HasPrefix(l, name+":") {
				mine = append(mine, l)
			} else if l != "" {
				keep = append(keep, l)
			}
		}
		if len(mine) == 0 {
			continue
		}
		if err := os.WriteFile(f, []byte(strings.Join(keep, "")), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			now, _ := os.ReadFile(f)
			if !strings.Contains(string(now), name+":") {
				fh, err := os.OpenFile(f, os.O_APPEND|os.O_WRONLY, 0)
				if err == nil {
					fh.WriteString(strings.Join(mine, ""))
					fh.Close()
				}
			}
		})
	}
}

// uidProcs lists the live processes of uid.
func uidProcs(uid int) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+e.Name(), &st) == nil && int(st.Uid) == uid {
			if s, _ := os.ReadFile("/proc/" + e.Name() + "/stat"); !strings.Contains(string(s), ") Z ") {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

func cmdlineOf(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return string(b)
}

// runtimeLeft lists uid's podman and conmon processes, pid and argv.
func runtimeLeft(uid int) []string {
	var out []string
	for _, pid := range uidProcs(uid) {
		if c := cmdlineOf(pid); strings.Contains(c, "podman") || strings.Contains(c, "conmon") {
			out = append(out, strconv.Itoa(pid)+" "+strings.ReplaceAll(c, "\x00", " "))
		}
	}
	return out
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
