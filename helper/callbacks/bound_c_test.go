package callbacks

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/cgroup"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestBoundMemoryC runs spank/bound.c (a step's lowering of the
// collector cgroup's memory bound to the job's memory) on this node's real
// hierarchies: memory the kernel can reclaim is reclaimed and the process
// lives; anonymous memory it cannot (no swap) above the job's memory is
// never left unbounded: the group's processes are killed and the bound is
// in force.
func TestBoundMemoryC(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (cgroup tests)")
	}
	hs, err := cgroup.Discover("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	hs = cgroup.Writable(hs)
	dir := t.TempDir()
	bin := testenv.BuildCDriver(t, dir, "bound", "bound.c", `#include <stdio.h>
#include <stdlib.h>
#include "bound.h"
int main(int argc, char **argv) {
	char msg[1024];
	int rc;
	(void)argc;
	rc = gos_bound_memory(argv[1], strtoull(argv[2], NULL, 10), msg, sizeof(msg));
	printf("%d %s\n", rc, msg);
	return 0;
}
`)
	base := "gym_otel_test/bound" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() {
		for _, h := range hs {
			_ = os.Remove(filepath.Join(h.Mount, base)) // gym_otel_test is shared
		}
	})
	// start runs script in a new group of bound MiB: the process joins the
	// group (every hierarchy) before it allocates anything.
	start := func(name string, boundMiB int64, script string) (*cgroup.Group, *exec.Cmd) {
		g, err := cgroup.Create(hs, base+"/"+name, cgroup.Limits{MemoryBytes: boundMiB << 20})
		if err != nil {
			t.Fatal(err)
		}
		if g.MemoryLimitFile() == "" || !strings.HasSuffix(g.MemoryLimitFile(), "memory.limit_in_bytes") {
			_ = g.Remove()
			testenv.Missing(t, "a cgroup v1 memory hierarchy")
		}
		t.Cleanup(func() { _, _ = g.Kill(5 * time.Second); _ = g.Remove() })
		go_ := filepath.Join(dir, name+".go")
		cmd := exec.Command("sh", "-c", `while [ ! -e "$0" ]; do sleep 0.05; done; `+script, go_)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		for _, d := range g.Dirs() {
			if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(go_, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return g, cmd
	}
	usage := func(g *cgroup.Group) int64 {
		b, _ := os.ReadFile(filepath.Join(filepath.Dir(g.MemoryLimitFile()), "memory.usage_in_bytes"))
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n
	}
	waitUsage := func(g *cgroup.Group, atLeast int64) {
		for deadline := time.Now().Add(60 * time.Second); usage(g) < atLeast; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the group holds %d bytes, not yet %d", usage(g), atLeast)
			}
		}
	}
	lower := func(g *cgroup.Group, mib int64) (string, string) {
		out, err := exec.Command(bin, g.MemoryLimitFile(), strconv.FormatInt(mib<<20, 10)).Output()
		if err != nil {
			t.Fatal(err)
		}
		rc, msg, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
		return rc, msg
	}
	limit := func(g *cgroup.Group) int64 {
		b, _ := os.ReadFile(g.MemoryLimitFile())
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n
	}

	// Anonymous memory above the job's: killed, then bounded.
	g, cmd := start("anon", 400, `(head -c 150M /dev/zero; exec sleep 1000) | tail -c 150M`)
	waitUsage(g, 150<<20)
	held := usage(g)
	rc, msg := lower(g, 64)
	t.Logf("anonymous %d MiB lowered to 64 MiB: rc %s: %s", held>>20, rc, msg)
	if rc != "3" || !strings.Contains(msg, "killed its") {
		t.Errorf("anonymous memory above the bound: rc %s (%s), want 3 (killed)", rc, msg)
	}
	if l := limit(g); l != 64<<20 {
		t.Errorf("the bound is %d, want %d", l, 64<<20)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Errorf("the group's process lives on")
	}
	if n := len(g.Pids()); n != 0 {
		t.Errorf("%d processes left in the group", n)
	}

	// Page cache (reclaimable) above the job's: lowered, the process lives.
	// (written and synced from inside the group: clean file pages
	// charged to it.)
	big := filepath.Join(dir, "big")
	g2, cmd2 := start("cache", 400, `head -c 120M /dev/zero > "`+big+`" && sync "`+big+`" && exec sleep 1000`)
	waitUsage(g2, 100<<20)
	held = usage(g2)
	rc, msg = lower(g2, 48)
	t.Logf("page cache %d MiB lowered to 48 MiB: rc %s: %s", held>>20, rc, msg)
	if rc != "1" && rc != "2" {
		t.Errorf("reclaimable memory: rc %s (%s), want 1 or 2 (lowered)", rc, msg)
	}
	if l := limit(g2); l != 48<<20 {
		t.Errorf("the bound is %d, want %d", l, 48<<20)
	}
	if err := syscall.Kill(cmd2.Process.Pid, 0); err != nil {
		t.Errorf("the process holding only page cache was killed: %v", err)
	}
	// Already below: kept.
	if rc, msg := lower(g2, 400); rc != "0" {
		t.Errorf("raising: rc %s (%s), want 0 (kept)", rc, msg)
	}
}
