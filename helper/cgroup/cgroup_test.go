package cgroup

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

func TestParseMountinfo(t *testing.T) {
	in := `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
42 31 0:39 / /sys/fs/cgroup/pids ro,nosuid - cgroup cgroup rw,pids
50 41 0:38 /docker/abc /mnt/sub rw,relatime - cgroup2 cgroup2 rw
`
	hs, err := parseMountinfo(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, h := range hs {
		got = append(got, strconv.Itoa(int(h.Version))+":"+h.Mount+":"+strings.Join(h.Controllers, ",")+":"+strconv.FormatBool(h.ReadOnly))
	}
	want := "1:/sys/fs/cgroup/cpuset:cpuset:false 1:/sys/fs/cgroup/memory:memory:false 1:/sys/fs/cgroup/cpu,cpuacct:cpuacct:false 2:/sys/fs/cgroup/unified::false 1:/sys/fs/cgroup/pids:pids:true"
	if strings.Join(got, " ") != want {
		t.Fatalf("got  %s\nwant %s", strings.Join(got, " "), want)
	}
	if w := Writable(hs); len(w) != 4 || w[3].Mount != "/sys/fs/cgroup/unified" {
		t.Fatalf("Writable: %+v", w)
	}
}

func TestParseProcCgroup(t *testing.T) {
	c := parseProcCgroup("9:name=systemd:/\n4:memory:/slurm/uid_1/job_2\n2:cpu,cpuacct:/a\n0::/gym_otel/n/job_2\n")
	if c.V1["memory"] != "/slurm/uid_1/job_2" || c.V1["cpuacct"] != "/a" || c.V1["cpu"] != "/a" || c.V2 != "/gym_otel/n/job_2" {
		t.Fatalf("%+v", c)
	}
	if p, ok := c.pathIn(Hierarchy{Version: V1, Controllers: []string{"cpuacct"}}); !ok || p != "/a" {
		t.Fatalf("pathIn cpuacct: %q %v", p, ok)
	}
	if _, ok := parseProcCgroup("4:memory:/x\n").pathIn(Hierarchy{Version: V2}); ok {
		t.Fatal("no v2 line must mean no v2 place")
	}
}

func TestRelPath(t *testing.T) {
	if p, err := RelPath("gym_otel", "gn1", 42); err != nil || p != "gym_otel/gn1/job_42" {
		t.Fatalf("%q %v", p, err)
	}
	for _, bad := range []string{"", ".", "..", "a/b"} {
		if _, err := RelPath("gym_otel", bad, 1); err == nil {
			t.Errorf("node %q accepted", bad)
		}
	}
}

// realHierarchies skips unless root can make groups on this node.
func realHierarchies(t *testing.T) []Hierarchy {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (cgroup tests)")
	}
	hs, err := Discover("/proc/self/mountinfo")
	if hs = Writable(hs); err != nil || len(hs) == 0 {
		testenv.Missing(t, "a mounted cgroup hierarchy")
	}
	t.Cleanup(func() { // this package's level; gym_otel_test is shared with other packages' tests
		for _, h := range hs {
			_ = os.Remove(filepath.Join(h.Mount, "gym_otel_test", "unit"))
		}
	})
	return hs
}

// startInside forks `sh -c script` from inside g, the way the prolog
// starts the supervisor.
func startInside(t testing.TB, g *Group, script string) *exec.Cmd {
	t.Helper()
	errc := make(chan error, 1)
	var cmd *exec.Cmd
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends here
		cmd = exec.Command("sh", "-c", script)
		errc <- g.StartInside(cmd)
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return cmd
}

func TestGroupKillsEscapees(t *testing.T) {
	hs := realHierarchies(t)
	rel, _ := RelPath("gym_otel_test", "unit", uint32(os.Getpid()))
	g, err := Create(hs, rel, Limits{MemoryBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = g.Kill(5 * time.Second); _ = g.Remove() }()
	self, _ := ProcCgroups("self")
	// A child that leaves a setsid daemon ignoring SIGTERM and a
	// double-forked one, then exits. Each writes its pid once its trap is
	// set: a SIGTERM before that would kill it, and prove nothing.
	marks := t.TempDir()
	cmd := startInside(t, g, `setsid sh -c 'trap "" TERM; echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; exec sleep 300' `+marks+`/a </dev/null >/dev/null 2>&1 &
		(sh -c 'trap "" TERM; echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; exec sleep 300' `+marks+`/b </dev/null >/dev/null 2>&1 &) ; exit 0`)
	_ = cmd.Wait()
	after, _ := ProcCgroups("self")
	if after.V2 != self.V2 || after.V1["memory"] != self.V1["memory"] {
		t.Fatalf("the forking process did not return to its cgroups: %+v, was %+v", after, self)
	}
	var left []int
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && len(left) < 2; time.Sleep(20 * time.Millisecond) {
		left = left[:0]
		for _, m := range []string{"a", "b"} {
			if b, err := os.ReadFile(filepath.Join(marks, m)); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
					left = append(left, pid)
				}
			}
		}
	}
	if len(left) < 2 {
		t.Fatalf("expected the two escapees to report, found %v", left)
	}
	for _, pid := range left {
		if !g.Contains(pid) {
			t.Errorf("pid %d not in the group (group lists %v)", pid, g.Pids())
		}
		_ = syscall.Kill(pid, syscall.SIGTERM) // ignored
	}
	if g.Contains(os.Getpid()) {
		t.Error("the test process is in the group")
	}
	n, err := g.Kill(5 * time.Second)
	if err != nil || n < 2 {
		t.Fatalf("Kill: %d %v", n, err)
	}
	for _, pid := range left {
		if syscall.Kill(pid, 0) == nil {
			if st, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); !strings.Contains(string(st), ") Z ") {
				t.Errorf("pid %d survived the group's kill", pid)
			}
		}
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	for _, d := range Open(hs, rel).Dirs() {
		t.Errorf("%s left behind", d)
	}
}

func TestGroupMemoryBound(t *testing.T) {
	hs := realHierarchies(t)
	rel, _ := RelPath("gym_otel_test", "unit", uint32(os.Getpid())+1)
	g, err := Create(hs, rel, Limits{MemoryBytes: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = g.Kill(5 * time.Second); _ = g.Remove() }()
	if g.MemoryLimitFile() == "" {
		testenv.Missing(t, "a memory controller")
	}
	// 128 MiB of touched memory in a 32 MiB group: the kernel kills it.
	cmd := startInside(t, g, `x=$(head -c 134217728 /dev/zero | tr '\0' a); echo ${#x}`)
	err = cmd.Wait()
	u := g.Usage()
	if err == nil {
		t.Error("128 MiB held in a 32 MiB group: the shell was not killed")
	}
	if u.OOMKills < 1 {
		t.Errorf("no OOM kill counted: %+v", u)
	}
	if u.MemoryLimitBytes != 32<<20 {
		t.Errorf("limit %d, want %d", u.MemoryLimitBytes, 32<<20)
	}
	if u.MemoryPeakBytes > 32<<20 {
		t.Errorf("peak %d above the bound", u.MemoryPeakBytes)
	}
	t.Logf("exit %v; usage %+v", err, u)
}

// BenchmarkStart compares what the prolog pays to start the supervisor in
// the job's own cgroup (create the group on every hierarchy, join it
// around the fork, and, at the epilog, kill and remove it) with a plain
// start, in one run: b.N starts of `sh -c "exit 0"` each.
func BenchmarkStart(b *testing.B) {
	hs, err := Discover("/proc/self/mountinfo")
	if err != nil || len(hs) == 0 || os.Geteuid() != 0 {
		b.Skip("needs root and a cgroup hierarchy")
	}
	b.Run("plain", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := exec.Command("sh", "-c", "exit 0").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("in-job-cgroup", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			rel, _ := RelPath("gym_otel_bench", "unit", uint32(i))
			g, err := Create(hs, rel, Limits{MemoryBytes: 1 << 30})
			if err != nil {
				b.Fatal(err)
			}
			cmd := startInside(b, g, "exit 0")
			_ = cmd.Wait()
			if _, err := g.Kill(time.Second); err != nil {
				b.Fatal(err)
			}
			if err := g.Remove(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestAnchored(t *testing.T) {
	mk := func(hs ...Hierarchy) *Group {
		g := &Group{}
		for _, h := range hs {
			g.dirs = append(g.dirs, dir{h: h})
		}
		return g
	}
	mem := Hierarchy{Version: V1, Controllers: []string{"memory"}}
	frz := Hierarchy{Version: V1, Controllers: []string{"freezer"}}
	if mk(mem, frz).Anchored() {
		t.Error("memory and freezer only: the user can leave both")
	}
	if !mk(mem, Hierarchy{Version: V1, Controllers: []string{"pids"}}).Anchored() {
		t.Error("v1 pids anchors")
	}
	if !mk(mem, Hierarchy{Version: V2}).Anchored() {
		t.Error("v2 anchors")
	}
}

// TestJobPath: the job group's path and its node's dir, the cluster left
// out when it is not a usable name, and GroupJobID reads back what
// GroupName names.
func TestJobPath(t *testing.T) {
	for _, c := range [][3]string{{"c1", "gn1", "gym_otel/c1/gn1/job_42"}, {"", "gn1", "gym_otel/gn1/job_42"}, {"a/b", "gn1", "gym_otel/gn1/job_42"}, {"..", "gn1", "gym_otel/gn1/job_42"}} {
		if p, err := JobPath(c[0], c[1], 42); err != nil || p != c[2] {
			t.Errorf("JobPath(%q, %q, 42) = %q, %v; want %q", c[0], c[1], p, err, c[2])
		}
		if p, err := NodePath(c[0], c[1]); err != nil || p != filepath.Dir(c[2]) {
			t.Errorf("NodePath(%q, %q) = %q, %v; want %q", c[0], c[1], p, err, filepath.Dir(c[2]))
		}
	}
	if _, err := JobPath("c1", "a/b", 1); err == nil {
		t.Error("a node name with a / was taken")
	}
	if _, err := NodePath("c1", ".."); err == nil {
		t.Error("node .. was taken")
	}
	if id, ok := GroupJobID(GroupName("4294967295")); !ok || id != 4294967295 {
		t.Errorf("GroupJobID: %d, %v", id, ok)
	}
	for _, bad := range []string{"job_", "job_x", "job_4294967296", "step_1", "7"} {
		if _, ok := GroupJobID(bad); ok {
			t.Errorf("GroupJobID(%q) took it", bad)
		}
	}
}
