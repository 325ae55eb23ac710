package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestPlaceFindsScope: on a fake tree, the scope is found where Slurm
// makes it, node's first, system.slice before another slice, only with
// its system directory; a hybrid host is left as it is; no scope is
// ErrNoDelegatedScope naming where it looked.
func TestPlaceFindsScope(t *testing.T) {
	mnt := t.TempDir()
	v2 := []Hierarchy{{Version: V2, Mount: mnt}}
	pid1 := parseProcCgroup("0::/init.scope\n")
	if _, err := place(v2, "gn1", pid1); !errors.Is(err, ErrNoDelegatedScope) || !strings.Contains(err.Error(), filepath.Join(mnt, "*.slice", "slurmstepd.scope")) {
		t.Fatalf("no scope: %v", err)
	}
	mk := func(p string) {
		if err := os.MkdirAll(filepath.Join(mnt, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mk("system.slice/slurmstepd.scope") // no system dir: not Slurm's (yet)
	if _, err := place(v2, "gn1", pid1); !errors.Is(err, ErrNoDelegatedScope) {
		t.Fatalf("scope without system: %v", err)
	}
	mk("system.slice/slurmstepd.scope/system")
	mk("hpc.slice/slurmstepd.scope/system")
	hs, err := place(v2, "gn1", pid1)
	if err != nil || hs[0].GroupRoot() != filepath.Join(mnt, "system.slice/slurmstepd.scope") || v2[0].Root != "" {
		t.Fatalf("got %+v %v", hs, err)
	}
	mk("hpc.slice/gn1_slurmstepd.scope/system")
	if hs, _ := place(v2, "gn1", pid1); hs[0].GroupRoot() != filepath.Join(mnt, "hpc.slice/gn1_slurmstepd.scope") {
		t.Fatalf("node's scope: %+v", hs)
	}
	// systemd in a container: PID 1 at /docker.slice/c.scope/init.scope.
	mk("docker.slice/c.scope/system.slice/slurmstepd.scope/system")
	if hs, _ := place(v2, "gn2", parseProcCgroup("0::/docker.slice/c.scope/init.scope\n")); hs[0].GroupRoot() != filepath.Join(mnt, "docker.slice/c.scope/system.slice/slurmstepd.scope") {
		t.Fatalf("container: %+v", hs)
	}
	hybrid := []Hierarchy{{Version: V1, Mount: "/sys/fs/cgroup/pids", Controllers: []string{"pids"}}, {Version: V2, Mount: mnt}}
	if hs, err := place(hybrid, "gn1", pid1); err != nil || hs[1].Root != "" {
		t.Fatalf("hybrid: %+v %v", hs, err)
	}
	// Create makes the group below the root, Open finds it there.
	scoped, _ := place(v2, "gn1", pid1)
	g := &Group{Rel: "gym_otel/c/gn1/job_1"}
	d := dir{h: scoped[0], path: filepath.Join(scoped[0].GroupRoot(), g.Rel)}
	if err := makeDir(scoped[0], d.path); err != nil {
		t.Fatal(err)
	}
	if dirs := Open(scoped, g.Rel).Dirs(); len(dirs) != 1 || dirs[0] != filepath.Join(mnt, "hpc.slice/gn1_slurmstepd.scope/gym_otel/c/gn1/job_1") {
		t.Fatalf("Open: %v", dirs)
	}
}

// TestSystemdPlacement runs on a systemd host with a unified tree and
// Slurm's delegated scope (the cgroup v2 guest): a group is made in the
// scope, a process born in it, killed and removed there, and the scope
// and its system directory stay.
func TestSystemdPlacement(t *testing.T) {
	if !SystemdHost() {
		// Not Missing: the one-host suite's machine has no systemd by
		// design; the cgroup v2 guest runs this.
		t.Skip("not a systemd host (no /run/systemd/system): the placement in Slurm's delegated scope is tested on a systemd guest")
	}
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (cgroup tests)")
	}
	hs, err := Discover("/proc/self/mountinfo")
	if hs = Writable(hs); err != nil || len(hs) != 1 || hs[0].Version != V2 {
		t.Skip("a systemd host without a unified cgroup v2 tree (hybrid or v1): groups stay at each hierarchy's top")
	}
	// Slurm names the scope <node>_slurmstepd.scope when slurmd runs with
	// a node name (as the guest's does), else slurmstepd.scope: the node
	// is this host's short name.
	node, _ := os.Hostname()
	node, _, _ = strings.Cut(node, ".")
	placed, err := Place(hs, node)
	if errors.Is(err, ErrNoDelegatedScope) {
		placed, err = Place(hs, "")
	}
	if errors.Is(err, ErrNoDelegatedScope) {
		testenv.Missing(t, "Slurm's delegated slurmstepd scope: "+err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	scope := placed[0].GroupRoot()
	if filepath.Base(filepath.Dir(scope)) == "" || !strings.HasSuffix(scope, "slurmstepd.scope") {
		t.Fatalf("root %s is not a slurmstepd scope", scope)
	}
	rel := filepath.Join("gym_otel_test", "systemd", "job_"+strconv.Itoa(os.Getpid()))
	defer func() {
		_ = os.Remove(filepath.Join(scope, "gym_otel_test", "systemd"))
		_ = os.Remove(filepath.Join(scope, "gym_otel_test"))
	}()
	g, err := Create(placed, rel, Limits{MemoryBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = g.Kill(5 * time.Second); _ = g.Remove() }()
	if d := g.Dirs(); len(d) != 1 || d[0] != filepath.Join(scope, rel) {
		t.Fatalf("group %v, want %s", d, filepath.Join(scope, rel))
	}
	if ids := attachedDevicePrograms(t, g.Dirs()[0]); len(ids) != 1 {
		t.Errorf("device programs %v on the group, want 1", ids)
	}
	cmd := startInside(t, g, "exec sleep 300")
	pc, err := ProcCgroups(strconv.Itoa(cmd.Process.Pid))
	if err != nil || filepath.Join(hs[0].Mount, pc.V2) != filepath.Join(scope, rel) {
		t.Fatalf("child in %q (%v), want %s", pc.V2, err, filepath.Join(scope, rel))
	}
	if _, err := g.Kill(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{scope, filepath.Join(scope, "system")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("Slurm's %s: %v", p, err)
		}
	}
}
