package supervise

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
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

// fakeBin writes a copy of sleep named slurmd into a dir every user can
// enter and returns its path (its processes' comm is "slurmd").
func fakeBin(t *testing.T) string {
	t.Helper()
	dir := openDir(t)
	bin := filepath.Join(dir, "slurmd")
	data, err := os.ReadFile("/bin/sleep")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// openDir is a temporary dir every user can enter (and its parent).
func openDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// startFake starts bin for 30 s, as uid (and gid) when uid >= 0, else as
// this process.
func startFake(t *testing.T, bin string, uid int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "30")
	if uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: a slurmd runs as root, and the attacker is another user")
	}
}

// Two root processes running the node's slurmd binary: nothing local can
// say which is this node's. One: it is adopted, and reads as gone once it
// exits. A root process named slurmd that runs another binary is not
// adopted (the path decides, not the name), and none is when the node's
// binary is not known.
func TestTheSlurmd(t *testing.T) {
	needRoot(t)
	bin, other := fakeBin(t), fakeBin(t)
	a := startFake(t, bin, -1)
	b := startFake(t, bin, -1)
	startFake(t, other, -1)
	if TheSlurmd(bin) != nil {
		t.Error("one of two slurmd was adopted")
	}
	_ = b.Process.Kill()
	_ = b.Wait()
	f := TheSlurmd(bin)
	if f == nil || !f() {
		t.Fatal("the only slurmd was not adopted")
	}
	if TheSlurmd("") != nil || TheSlurmd(filepath.Join(t.TempDir(), "slurmd")) != nil {
		t.Error("a slurmd running another binary was adopted")
	}
	_ = a.Process.Kill()
	_ = a.Wait()
	if f() {
		t.Error("an exited slurmd reads as alive")
	}
}

// A package upgrade replaces the binary under the running slurmd: its exe
// reads "<path> (deleted)", and it is still the node's slurmd.
func TestTheSlurmdAfterUpgrade(t *testing.T) {
	needRoot(t)
	bin := fakeBin(t)
	startFake(t, bin, -1)
	data, _ := os.ReadFile(bin)
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if f := TheSlurmd(bin); f == nil || !f() {
		t.Error("the slurmd whose binary was replaced was not adopted")
	}
}

// The attack: an unprivileged user runs a program named slurmd, from the
// node's slurmd path's name or even from a copy at a path of their own.
// It is not adopted, neither by a root caller (which reads its exe) nor by
// the supervisor's view, another unprivileged user's (which cannot read a
// root process's exe and relies on uid 0).
func TestTheSlurmdNotAUsersProcess(t *testing.T) {
	needRoot(t)
	bin := fakeBin(t)
	const attacker, victim = 65534, 65533
	fake := startFake(t, bin, attacker)
	if uid, err := proc.RealUID(fake.Process.Pid); err != nil || uid != attacker {
		t.Fatalf("the fake runs as %d (%v)", uid, err)
	}
	if TheSlurmd(bin) != nil {
		t.Error("root adopted a slurmd of an unprivileged user")
	}
	if _, err := launch.SlurmdAnchor(fake.Process.Pid); err == nil || !strings.Contains(err.Error(), "does not run as root") {
		t.Errorf("launch.SlurmdAnchor of the fake: %v", err)
	}
	if got := theSlurmdAs(t, victim, bin); got != "none" {
		t.Errorf("another user's supervisor: %s, want none", got)
	}
	// The same view adopts a root slurmd it cannot read the exe of, when
	// it is the only one.
	_ = fake.Process.Kill()
	_ = fake.Wait()
	if others := countRootSlurmd(t); others > 0 {
		t.Skipf("%d other root slurmd run on this host: the supervisor's view of the one-slurmd case cannot be checked here", others)
	}
	startFake(t, bin, -1)
	if got := theSlurmdAs(t, victim, bin); got != "adopted" {
		t.Errorf("an unprivileged caller: %s, want the only root slurmd adopted", got)
	}
}

// theSlurmdAs runs TheSlurmd(exe) in a copy of this test binary as uid and
// returns "adopted" or "none".
func theSlurmdAs(t *testing.T, uid int, exe string) string {
	t.Helper()
	dir := openDir(t)
	cp := CopyTestBinary(t, dir)
	cmd := exec.Command(cp, "-test.run=^TestTheSlurmdChild$")
	cmd.Env = []string{"GOS_THESLURMD_EXE=" + exe}
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as uid %d: %v\n%s", uid, err, out)
	}
	for _, w := range []string{"adopted", "none"} {
		if strings.Contains(string(out), "THESLURMD="+w) {
			return w
		}
	}
	t.Fatalf("as uid %d: no answer\n%s", uid, out)
	return ""
}

// TestTheSlurmdChild is theSlurmdAs's child (skipped otherwise).
func TestTheSlurmdChild(t *testing.T) {
	exe := os.Getenv("GOS_THESLURMD_EXE")
	if exe == "" {
		t.Skip("the child of TestTheSlurmdNotAUsersProcess")
	}
	if TheSlurmd(exe) != nil {
		fmt.Println("THESLURMD=adopted")
	} else {
		fmt.Println("THESLURMD=none")
	}
}

// countRootSlurmd counts the root processes named slurmd on this host.
func countRootSlurmd(t *testing.T) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if c, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm")); err == nil && string(c) == "slurmd\n" && proc.RunsAsRoot(pid) {
			n++
		}
	}
	return n
}
