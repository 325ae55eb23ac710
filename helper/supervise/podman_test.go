package supervise_test

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

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// podmanImage is the tag the Podman test imports its image under.
const podmanImage = "localhost/gym-otel-collector:test"

// TestContainerPodman runs a job's collector through otel.container with
// rootless Podman as the job's user (gymuser), from an image built here (a
// root file system with a shell, the C library and the collector, imported
// with `podman import` into a read-only image store of root's, as a site
// would keep it: no registry). The runtime's per-job state (XDG_RUNTIME_DIR,
// --root, --runroot, HOME) is in {rundir}; the tokens reach the container by
// name only (--env={envname}, which Podman fills from its own
// environment). The job dir is under /tmp, and a tmpfs there holds the
// bind's mount point: rootless Podman cannot make a dir in an image layer
// of root's ("value too large for defined data type"). The backend must get the job's spans with the job's token,
// the job's files its metrics, and nothing of the runtime may outlive the
// drain but what the test measures and reports (Podman's pause process).
func TestContainerPodman(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root (the job's user is gymuser)")
	}
	podman := testenv.Binary(t, "podman")
	runc := testenv.Binary(t, "runc", "/usr/sbin/runc", "/usr/bin/runc")
	u := ensureGymUser(t)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)

	dir := harness.SharedDir(t)
	store, archive := testenv.PodmanImage(t, podman, dir, podmanImage)
	jobDir := filepath.Join(dir, "job")
	if err := os.Mkdir(jobDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(jobDir, uid, gid); err != nil {
		t.Fatal(err)
	}
	// A user with subordinate ids reads the image from the shared store;
	// with the single mapping only (no ids) a layer of root's cannot be
	// used and each job loads the archive into its own storage.
	image := podmanImage
	if data, _ := os.ReadFile("/etc/subuid"); !strings.Contains("\n"+string(data), "\ngymuser:") {
		store, image = "", "oci-archive:"+archive
	}
	runtime := testenv.PodmanRuntime(podman, runc, store, "/tmp")

	token := "pod$man{" + harness.RandHex(8) + "}$$"
	be := harness.StartBackend(t, token)
	start := time.Now()
	s := harness.StartSup(t, harness.Job{JobID: "4401", User: "gymuser", Token: token, Endpoint: be.URL,
		VLLMPort: harness.StartVLLM(t), Output: filepath.Join(jobDir, "otel"), Health: 60,
		Container: image, ContainerRuntime: runtime}).MustReady(t)
	t.Logf("ready through rootless podman in %v (report after %v)", time.Since(start), s.ReportAfter)
	t.Cleanup(func() { killPodmanLeftovers(t, uid) })
	// A second job of the same user on the node, whose end must not
	// touch the first's collector: its own {rundir}, so its own pause
	// process and storage.
	job2 := filepath.Join(dir, "job2")
	if err := os.Mkdir(job2, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chown(job2, uid, gid)
	s2 := harness.StartSup(t, harness.Job{JobID: "4402", User: "gymuser", Output: filepath.Join(job2, "otel"), Health: 60,
		Container: image, ContainerRuntime: runtime}).MustReady(t)
	if took, err := s2.Drain(t, 60*time.Second); err != nil {
		t.Fatalf("second job's drain: %v\n%s", err, s2.Output())
	} else {
		t.Logf("the second job of gymuser drained in %v", took)
	}
	s2.AssertGone(t)
	if !harness.HTTPOK(s.HealthURL()) {
		t.Fatalf("the first job's collector is not healthy after the second job's end")
	}

	// The collector in the container: the job's user's, with its
	// variables set from the runtime's by name.
	var colls []int
	for _, pid := range harness.ProcsMatching("/otelcol-gym\x00--config\x00" + filepath.Join(s.Out, jobdir.ConfigFile)) {
		if bytes.HasPrefix(mustCmdline(pid), []byte("/otelcol-gym\x00")) {
			colls = append(colls, pid)
		}
	}
	if len(colls) != 1 {
		t.Fatalf("collector processes in the container: %v, want one", colls)
	}
	coll := colls[0]
	if f := strings.Fields(harness.ProcStatus(t, coll, "Uid")); len(f) == 0 || f[0] != u.Uid {
		t.Errorf("the container's collector runs as uid %v, want %s", f, u.Uid)
	}
	env, err := os.ReadFile("/proc/" + strconv.Itoa(coll) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"GYM_OTEL_RECEIVER_TOKEN=" + s.ReceiverToken, "GYM_OTEL_PLUGIN_TOKEN=", "GOMEMLIMIT=409MiB"} {
		if !bytes.Contains(env, []byte("\x00"+want)) && !bytes.HasPrefix(env, []byte(want)) {
			t.Errorf("the container's collector has no %q in its environment", strings.SplitN(want, "=", 2)[0]+"=...")
		}
	}
	// Delivery from the files (the default): the supervisor sends to the
	// backend; the collector has no backend exporter, and no backend token.
	if bytes.Contains(env, []byte("\x00OTEL_TOKEN=")) || bytes.HasPrefix(env, []byte("OTEL_TOKEN=")) || bytes.Contains(env, []byte(strings.ReplaceAll(token, "$", "$$"))) {
		t.Errorf("the container's collector has the backend token in its environment with delivery from the files")
	}
	// Containment: the runtime makes no cgroup of its own (rootless, the
	// cgroupfs manager on a host whose controllers are v1): the
	// container's collector is in the supervisor's groups, so in the
	// plugin's.
	if a, b := cgroupsOf(t, coll), cgroupsOf(t, s.Cmd.Process.Pid); a != b {
		t.Errorf("the container's collector is in the cgroups\n%s\nthe supervisor in\n%s", a, b)
	}
	rundir := ""
	if argv, err := os.ReadFile("/proc/" + strconv.Itoa(s.Report.CollectorPID) + "/cmdline"); err == nil {
		for _, a := range strings.Split(string(argv), "\x00") {
			if v, ok := strings.CutPrefix(a, "--root="); ok {
				rundir = filepath.Dir(v)
			} else if strings.HasSuffix(a, "/storage") && rundir == "" {
				rundir = filepath.Dir(a)
			}
		}
	}
	if fi, err := os.Stat(rundir); err != nil || fi.Mode().Perm() != 0o700 || fi.Sys().(*syscall.Stat_t).Uid != uint32(uid) {
		t.Errorf("{rundir} %q: %v %v; want a 0700 dir of gymuser", rundir, fi, err)
	}

	// What rootless Podman with subordinate ids sometimes leaves in its
	// storage (about 1 run in 12): a dir of one of the user's subordinate
	// ids, mode 0700, that the user cannot enter. Planted here so that
	// every run with ids checks its removal (podman unshare rm -rf at the
	// supervisor's end).
	planted := ""
	if sub := firstSubID(t, "/etc/subuid", u.Username); sub > 0 && store != "" {
		planted = filepath.Join(rundir, "storage", "overlay", "gym-test-leftover")
		if err := os.MkdirAll(filepath.Join(planted, "work", "work"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(planted, "work", "work", "f"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{filepath.Join(planted, "work", "work", "f"), filepath.Join(planted, "work", "work"), filepath.Join(planted, "work"), planted} {
			if err := os.Lchown(p, sub+1000, sub+1000); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("planted %s (uid %d, mode 0700): what rootless Podman sometimes leaves", planted, sub+1000)
	}

	harness.WaitMetricNames(t, s, 30*time.Second, "vllm_prompt_tokens_total")
	s.RunGym(t, "agent", 2, "local")
	harness.AssertNoLeak(t, token, s.Out, map[string]string{"the supervisor's output": s.Output()})
	pluginTokenReaders(t, env, token, uid, rundir, s.Out)
	took, err := s.Drain(t, 60*time.Second)
	if err != nil {
		t.Fatalf("drain through podman: %v\n%s", err, s.Output())
	}
	t.Logf("drained through podman in %v", took)
	s.AssertGone(t)
	if harness.ProcAlive(coll, 0) && harness.ProcState(coll) != "Z" {
		t.Errorf("the container's collector (pid %d) outlived the drain", coll)
	}
	if st := s.State(t); st.Status != jobdir.StatusDrained || st.ExportProblems != "" {
		t.Errorf("state.json: %+v; want drained without export problems", st)
	}
	if _, err := os.Stat(rundir); !os.IsNotExist(err) {
		left, _ := exec.Command("find", rundir, "-maxdepth", "4", "-printf", "%u %m %p\n").CombinedOutput()
		t.Errorf("{rundir} %s after the supervisor's end: %v, want it removed; left:\n%s\nthe supervisor:\n%s", rundir, err, left, s.Output())
		os.RemoveAll(rundir)
	}
	if m := regexp.MustCompile(`inside Podman's user namespace \(podman unshare rm -rf, (\d+) ms\): .*`).FindStringSubmatch(s.Output()); m != nil {
		t.Logf("the supervisor removed what the user could not in {rundir} through podman unshare in %s ms: %s", m[1], m[0])
	} else if planted != "" {
		t.Errorf("the supervisor did not say that it removed %s through podman unshare:\n%s", planted, s.Output())
	}
	be.Stop(t)
	if d := otlptest.MustRead(t, be.Dir, "traces"); d.SpanCount("gym.rollout") != 2 {
		t.Errorf("the backend got %d gym.rollout spans, want 2", d.SpanCount("gym.rollout"))
	}
	if m := otlptest.MustRead(t, s.Out, "metrics"); len(m.Named("vllm_prompt_tokens_total")) == 0 {
		t.Errorf("the job's metrics.jsonl has no vllm_prompt_tokens_total")
	}
	// Podman's pause process (it holds the rootless user namespace)
	// outlives `podman run`: the supervisor, its subreaper, ends it.
	if left := runtimeProcs(uid); len(left) > 0 {
		t.Errorf("the runtime's processes outlived the supervisor: %q", left)
	}
	if !strings.Contains(s.Output(), "ended what the runtime left running after the collector") {
		t.Errorf("the supervisor did not say that it ended the runtime's leftovers:\n%s", s.Output())
	}
}

// firstSubID is the first id of name's range in file (/etc/subuid:
// "name:first:count"), 0 when it has none.
func firstSubID(t *testing.T, file, name string) int {
	data, _ := os.ReadFile(file)
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Split(l, ":"); len(f) == 3 && f[0] == name {
			n, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatalf("%s: %q: %v", file, l, err)
			}
			return n
		}
	}
	return 0
}

// pluginTokenReaders measures who can read the plugin token of a job whose
// collector runs through rootless Podman (collEnv: the container's
// collector's environment, read by root): the runtime's own processes
// (podman, conmon, runc, its pause process) are dumpable, so a process of
// the job's uid reads the token from their /proc/<pid>/environ (the
// admin guide says so); another uid (nobody) reads it from none of the
// runtime's processes, and from no file: Podman keeps the container's
// environment in its state under {rundir} (0700, the job's user's), and
// the job's output dir holds no copy. The same for the backend token
// (backendToken, as the collector's environment has it: each "$" doubled).
func pluginTokenReaders(t *testing.T, collEnv []byte, backendToken string, uid int, rundir, out string) {
	t.Helper()
	ptoken := ""
	for _, kv := range bytes.Split(collEnv, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("GYM_OTEL_PLUGIN_TOKEN=")); ok {
			ptoken = string(v)
		}
	}
	if len(ptoken) < 16 {
		t.Fatalf("no plugin token in the container's collector's environment")
	}
	// readAs reads path as uid (its own gid, no groups): its bytes, or
	// the error.
	readAs := func(path string, uid int) ([]byte, error) {
		cmd := exec.Command("cat", path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
		}
		return b, nil
	}
	const nobody = 65534
	procs := userProcs(uid)
	ownReads, otherReads := 0, 0
	for _, pid := range procs {
		environ := "/proc/" + strconv.Itoa(pid) + "/environ"
		if b, err := readAs(environ, uid); err == nil && bytes.Contains(b, []byte(ptoken)) {
			ownReads++
		}
		if b, err := readAs(environ, nobody); err == nil {
			otherReads++
			if bytes.Contains(b, []byte(ptoken)) {
				t.Errorf("another uid (nobody) read the plugin token from %s (%s)", environ, bytes.ReplaceAll(mustCmdline(pid), []byte{0}, []byte(" ")))
			}
		}
	}
	t.Logf("the plugin token in /proc/<pid>/environ of %d of the job's user's %d processes, read as the job's user; another uid (nobody) opened %d of them", ownReads, len(procs), otherReads)
	if ownReads == 0 {
		t.Errorf("the job's user read the plugin token from none of the runtime's processes: the admin guide says the runtime's are dumpable; update it")
	}
	for _, tok := range []struct{ name, value string }{{"plugin token", ptoken}, {"backend token", strings.ReplaceAll(backendToken, "$", "$$")}} {
		var holders []string
		for _, root := range []string{rundir, out} {
			filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
				if err != nil || !d.Type().IsRegular() {
					return nil
				}
				if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, []byte(tok.value)) {
					holders = append(holders, path)
					if _, err := readAs(path, nobody); err == nil {
						t.Errorf("another uid (nobody) reads %s, which holds the %s", path, tok.name)
					}
				}
				return nil
			})
		}
		t.Logf("files holding the %s: %q (each refused to nobody)", tok.name, holders)
		for _, h := range holders {
			if !strings.HasPrefix(h, rundir+"/") {
				t.Errorf("%s holds the %s outside {rundir}", h, tok.name)
			}
		}
	}
}

// cgroupsOf is /proc/<pid>/cgroup.
func cgroupsOf(t *testing.T, pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// userProcs lists the live processes of uid.
func userProcs(uid int) []int {
	return harness.LiveProcesses(func(pid int) bool {
		var st syscall.Stat_t
		return syscall.Stat("/proc/"+strconv.Itoa(pid), &st) == nil && int(st.Uid) == uid
	})
}

func mustCmdline(pid int) []byte {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return b
}

// runtimeProcs lists uid's live podman and conmon processes, pid and argv.
func runtimeProcs(uid int) []string {
	var out []string
	for _, pid := range userProcs(uid) {
		if c := string(mustCmdline(pid)); strings.Contains(c, "podman") || strings.Contains(c, "conmon") {
			out = append(out, strconv.Itoa(pid)+" "+strings.ReplaceAll(c, "\x00", " "))
		}
	}
	return out
}

// killPodmanLeftovers SIGKILLs gymuser's podman and conmon processes left
// by a failed run of the test.
func killPodmanLeftovers(t *testing.T, uid int) {
	for _, p := range runtimeProcs(uid) {
		pid, _ := strconv.Atoi(strings.Fields(p)[0])
		syscall.Kill(pid, syscall.SIGKILL)
	}
}
