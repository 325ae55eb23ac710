package cgroup

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestStartInsideNeverJoins: 50 starts into a group while another
// goroutine reads the cgroups of every thread of this process without
// pause. Every child is in the group on every hierarchy; no thread of
// this process is ever seen in the group's v2 directory (clone3 places
// the child), and no thread but the one that forks in a v1 one.
func TestStartInsideNeverJoins(t *testing.T) {
	hs := realHierarchies(t)
	rel, _ := RelPath("gym_otel_test", "unit", uint32(os.Getpid())+2)
	g, err := Create(hs, rel, Limits{MemoryBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = g.Kill(5 * time.Second); _ = g.Remove() }()
	hasV2 := false
	for _, h := range hs {
		hasV2 = hasV2 || h.Version == V2
	}
	var samples, v2Seen, otherSeen, forkerSeen atomic.Int64
	var forkers sync.Map // thread ids that ran StartInside
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			tasks, _ := os.ReadDir("/proc/self/task")
			for _, task := range tasks {
				data, err := readBounded(filepath.Join("/proc/self/task", task.Name(), "cgroup"), 64*1024)
				if err != nil {
					continue
				}
				samples.Add(1)
				c := parseProcCgroup(data)
				if c.hasV2 && c.V2 == "/"+rel {
					v2Seen.Add(1)
				}
				for _, p := range c.V1 {
					if p == "/"+rel {
						if _, ok := forkers.Load(task.Name()); ok {
							forkerSeen.Add(1)
						} else {
							otherSeen.Add(1)
						}
						break
					}
				}
			}
		}
	}()
	const starts = 50
	for i := 0; i < starts; i++ {
		errc := make(chan error, 1)
		var cmd *exec.Cmd
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends here
			forkers.Store(strconv.Itoa(unix.Gettid()), true)
			cmd = exec.Command("sleep", "30")
			errc <- g.StartInside(cmd)
		}()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if !g.Contains(cmd.Process.Pid) {
			pc, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/cgroup")
			t.Errorf("start %d: the child is not in the group on every hierarchy:\n%s", i, pc)
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	close(stop)
	wg.Wait()
	t.Logf("%d starts (clone3 into v2: %v); %d thread samples: in the v2 group %d, another thread in a v1 group %d, the forking thread in a v1 group %d",
		starts, hasV2 && CloneIntoCgroup(), samples.Load(), v2Seen.Load(), otherSeen.Load(), forkerSeen.Load())
	if hasV2 && CloneIntoCgroup() && v2Seen.Load() != 0 {
		t.Errorf("a thread of this process was seen in the group's v2 directory %d times", v2Seen.Load())
	}
	if otherSeen.Load() != 0 {
		t.Errorf("a thread other than the forking one was seen in a v1 group %d times", otherSeen.Load())
	}
	self, _ := ProcCgroups("self")
	for _, p := range self.V1 {
		if p == "/"+rel {
			t.Errorf("this process is left in the group: %+v", self)
		}
	}
}
