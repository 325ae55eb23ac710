//go:build vmguest

package guest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/cgroup"
)

// procState is the state letter of /proc/<pid>/stat ("" when it is gone).
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2 : i+3]
	}
	return "?"
}

// TestGroupKillEndsEscapees, with the cgroup package's own functions on
// this v2 + systemd node: a setsid child and a double-forked one, both
// ignoring SIGTERM, started inside a group; Group.Kill (cgroup.kill)
// returns once the group's cgroup.procs is empty. It records each
// escapee's state at that moment (v2 stops listing a task in cgroup.procs
// while it is still exiting, so a task may be seen running or in D for a
// moment after Kill), then requires both to be gone (or zombies) within
// 10 s. A process still there after that survived.
func TestGroupKillEndsEscapees(t *testing.T) {
	hs, err := cgroup.Discover("/proc/self/mountinfo")
	if hs = cgroup.Writable(hs); err != nil || len(hs) == 0 {
		t.Fatalf("no writable cgroup hierarchy: %v", err)
	}
	rel, _ := cgroup.RelPath("gym_otel_vmtest", "unit", uint32(os.Getpid()))
	g, err := cgroup.Create(hs, rel, cgroup.Limits{MemoryBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_, _ = g.Kill(5 * time.Second)
		_ = g.Remove()
		for _, h := range hs {
			_ = os.Remove(filepath.Join(h.Mount, "gym_otel_vmtest", "unit"))
			_ = os.Remove(filepath.Join(h.Mount, "gym_otel_vmtest"))
		}
	}()
	marks := t.TempDir()
	errc := make(chan error, 1)
	var cmd *exec.Cmd
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends here
		cmd = exec.Command("sh", "-c", `setsid sh -c 'trap "" TERM; echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; exec sleep 300' `+marks+`/a </dev/null >/dev/null 2>&1 &
		(sh -c 'trap "" TERM; echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; exec sleep 300' `+marks+`/b </dev/null >/dev/null 2>&1 &) ; exit 0`)
		errc <- g.StartInside(cmd)
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	a, b := readPid(t, marks+"/a"), readPid(t, marks+"/b")
	for _, pid := range []int{a, b} {
		if !g.Contains(pid) {
			t.Errorf("escapee %d is not in the group", pid)
		}
	}
	start := time.Now()
	n, err := g.Kill(5 * time.Second)
	took := time.Since(start)
	stA, stB := procState(a), procState(b)
	pidsAfter := g.Pids()
	var goneAfter time.Duration
	gone := waitFor(10*time.Second, func() bool {
		sa, sb := procState(a), procState(b)
		return (sa == "" || sa == "Z") && (sb == "" || sb == "Z")
	})
	goneAfter = time.Since(start)
	t.Logf("Kill: %d processes, %v, in %v; right after it: setsid child %d state %q, double-forked %d state %q, group lists %v; both gone or zombies %v after the kill: %v",
		n, err, took.Round(time.Millisecond), a, stA, b, stB, pidsAfter, gone, goneAfter.Round(time.Millisecond))
	if err != nil {
		t.Errorf("Kill: %v", err)
	}
	if !gone {
		t.Errorf("survived the group's kill by 10 s: %d state %q, %d state %q", a, procState(a), b, procState(b))
	}
	if err := g.Remove(); err != nil {
		t.Errorf("Remove: %v", err)
	}
}
