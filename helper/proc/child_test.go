package proc

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A group that ends on SIGTERM stops within the bound, by that signal; one
// whose members ignore it (a child left in the group too) is SIGKILLed at
// the bound, and nothing of the group is left.
func TestStopGroup(t *testing.T) {
	start := func(script string) *Child {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return Watch(cmd)
	}
	c := start("exec sleep 30")
	time.Sleep(100 * time.Millisecond)
	if killed := c.StopGroup(5*time.Second, false); killed || !TerminatedBy(c.Err(), syscall.SIGTERM) {
		t.Fatalf("killed %v, exit %v", killed, c.Err())
	}
	c = start("trap '' TERM; sleep 30 & wait")
	time.Sleep(200 * time.Millisecond)
	t0 := time.Now()
	if killed := c.StopGroup(300*time.Millisecond, false); !killed || c.Running() {
		t.Fatalf("a child that ignores SIGTERM: killed %v, running %v", killed, c.Running())
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Fatalf("the stop took %s for a 300ms bound", d)
	}
	// The sleep left in the group was SIGKILLed too: gone once its new
	// parent reaps it.
	for deadline := time.Now().Add(5 * time.Second); syscall.Kill(-c.Pid, 0) == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a member of the group outlived its kill")
		}
	}
	if c.StopGroup(time.Second, true) {
		t.Fatal("a child already gone was killed again")
	}
}

// StartAsUser: the child runs as the credential, in a session of its
// own, with no_new_privs, oom_score_adj 0 and none of this process's
// descriptors; this process's own are as they were.
func TestStartAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start a process as another user")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	// A descriptor without close-on-exec, as slurmstepd may hold one.
	if _, err := unix.FcntlInt(w.Fd(), unix.F_SETFD, 0); err != nil {
		t.Fatal(err)
	}
	oldOOM, _ := os.ReadFile("/proc/self/oom_score_adj")
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(out.Name(), 0o666)
	script := `id -u; id -g; id -G; grep NoNewPrivs /proc/self/status; cat /proc/self/oom_score_adj; ls /proc/self/fd | wc -l; ps -o sid= -p $$`
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Dir = "/"
	if err := StartAsUser(cmd, Credential{UID: 65534, GID: 65534, Groups: []uint32{65534}}, nil); err != nil {
		t.Fatal(err)
	}
	c := Watch(cmd)
	if !c.WaitExit(10 * time.Second) {
		t.Fatal("no exit")
	}
	data, _ := os.ReadFile(out.Name())
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 7 || lines[0] != "65534" || lines[1] != "65534" || lines[2] != "65534" ||
		strings.Fields(lines[3])[1] != "1" || lines[4] != "0" || strings.TrimSpace(lines[6]) != strconv.Itoa(c.Pid) {
		t.Fatalf("the child saw:\n%s", data)
	}
	// 0, 1, 2 and the one ls reads: nothing of this process's.
	if n, _ := strconv.Atoi(strings.TrimSpace(lines[5])); n != 4 {
		t.Fatalf("the child held %d descriptors:\n%s", n, data)
	}
	if f, _ := unix.FcntlInt(w.Fd(), unix.F_GETFD, 0); f&unix.FD_CLOEXEC != 0 {
		t.Fatal("this process's descriptor stayed close-on-exec")
	}
	if now, _ := os.ReadFile("/proc/self/oom_score_adj"); string(now) != string(oldOOM) {
		t.Fatalf("oom_score_adj %q, was %q", now, oldOOM)
	}
	var nnp int
	if v, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); err == nil {
		nnp = v
	}
	if nnp != 0 {
		t.Fatal("this thread got no_new_privs")
	}
}

// WatchPID: a child started without os/exec is reaped once, its exit
// status read as Watch reads one (an *exec.ExitError with the code), and
// it can be stopped as a Child.
func TestWatchPID(t *testing.T) {
	p, err := os.StartProcess("/bin/sh", []string{"sh", "-c", "exit 3"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := WatchPID(p.Pid, "/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	if !c.WaitExit(5 * time.Second) {
		t.Fatal("no exit seen")
	}
	var ee *exec.ExitError
	if !errors.As(c.Err(), &ee) || ee.ExitCode() != 3 || c.Running() {
		t.Fatalf("Err %v, want exit status 3", c.Err())
	}
	p, err = os.StartProcess("/bin/sleep", []string{"sleep", "60"}, &os.ProcAttr{Sys: &syscall.SysProcAttr{Setsid: true}})
	if err != nil {
		t.Fatal(err)
	}
	c, err = WatchPID(p.Pid, "/bin/sleep")
	if err != nil {
		t.Fatal(err)
	}
	if killed := c.StopGroup(2*time.Second, true); killed || !TerminatedBy(c.Err(), syscall.SIGTERM) {
		t.Fatalf("stop: killed %v, Err %v; want ended by SIGTERM", killed, c.Err())
	}
}
