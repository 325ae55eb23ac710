package lifecycle

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
)

// A live process with its start time is alive; the same pid with another
// start time (a reused pid) and an exited process are not.
func TestSlurmdAliveFunc(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	start, err := proc.StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	alive := SlurmdAliveFunc(fmt.Sprintf("%d %d", pid, start))
	reused := SlurmdAliveFunc(fmt.Sprintf("%d %d", pid, start+1))
	if alive == nil || reused == nil {
		t.Fatal("a well-formed value parsed to nil")
	}
	if !alive() {
		t.Error("a running process with its start time reads as gone")
	}
	if reused() {
		t.Error("a pid with another start time reads as alive")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if alive() {
		t.Error("an exited process reads as alive")
	}
	for _, v := range []string{"", "12", "x 1", "1 1", "12 -3", "12 3 4"} {
		if SlurmdAliveFunc(v) != nil {
			t.Errorf("%q parsed", v)
		}
	}
}

// SlurmdAnchor accepts only a process named slurmd.
func TestSlurmdAnchorNotSlurmd(t *testing.T) {
	if _, err := SlurmdAnchor(os.Getpid()); err == nil {
		t.Error("the test process was taken for a slurmd")
	}
}

func TestParseJobEnd(t *testing.T) {
	if got := ParseJobEnd("1764590400"); !got.Equal(time.Unix(1764590400, 0)) {
		t.Errorf("got %v", got)
	}
	for _, v := range []string{"", "0", "-5", "soon"} {
		if !ParseJobEnd(v).IsZero() {
			t.Errorf("%q gave a time", v)
		}
	}
}

// Slurm is asked only when the node cannot vouch for the job's end.
func TestEndWillCome(t *testing.T) {
	yes, no := func() bool { return true }, func() bool { return false }
	for _, c := range []struct {
		alive func() bool
		end   time.Time
		want  bool
	}{
		{nil, time.Time{}, false},
		{no, time.Time{}, false},
		{yes, time.Time{}, true},
		{yes, time.Now().Add(time.Hour), true},
		{yes, time.Now().Add(-JobEndGrace / 2), true},
		{yes, time.Now().Add(-2 * JobEndGrace), false},
	} {
		s := &supervisor{opt: Options{SlurmdAlive: c.alive, JobEnd: c.end}}
		if got := s.endWillCome(); got != c.want {
			t.Errorf("alive=%v end=%v: %v, want %v", c.alive != nil, c.end, got, c.want)
		}
	}
}

// startFake starts a copy of sleep named slurmd (its comm is "slurmd").
func startFake(t *testing.T) *exec.Cmd {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "slurmd")
	data, err := os.ReadFile("/bin/sleep")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// Two processes named slurmd: nothing local can say which is this node's.
// One: it is adopted, and reads as gone once it exits.
func TestTheSlurmd(t *testing.T) {
	a := startFake(t)
	b := startFake(t)
	if TheSlurmd() != nil {
		t.Error("one of two slurmd was adopted")
	}
	_ = b.Process.Kill()
	_ = b.Wait()
	if others := countSlurmd(t) - 1; others > 0 {
		t.Skipf("%d other slurmd run on this host: the one-slurmd case cannot be checked here", others)
	}
	f := TheSlurmd()
	if f == nil || !f() {
		t.Fatal("the only slurmd was not adopted")
	}
	_ = a.Process.Kill()
	_ = a.Wait()
	if f() {
		t.Error("an exited slurmd reads as alive")
	}
}

func countSlurmd(t *testing.T) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		if c, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm")); err == nil && string(c) == "slurmd\n" {
			n++
		}
	}
	return n
}
