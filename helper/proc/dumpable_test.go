package proc_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
)

// secretMark is in the environment of TestNotDumpable's children.
const secretMark = "GOS_SECRET=s3cr3t-mark"

// TestNotDumpable: another process of the same uid (nobody here, as a
// job's task is the supervisor's and the collector's) reads a dumpable
// process's environment; it cannot once the process called NotDumpable,
// nor when the process's program is execute-only for it (mode 0711: the
// kernel makes it not dumpable at the execve, before its first
// instruction, as PR_GET_DUMPABLE says).
func TestNotDumpable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the processes run as another user")
	}
	dir := openDir(t)
	nobody := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	for _, c := range []struct {
		name     string
		mode     os.FileMode
		set      bool
		atExec   string // Dumpable at the child's start
		readable bool   // its environ by another process of its uid
	}{
		{"readable program", 0o755, false, "true", true},
		{"readable program, NotDumpable", 0o755, true, "true", false},
		{"execute-only program", 0o711, false, "false", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cp := copyOfTest(t, dir, c.mode)
			cmd := exec.Command(cp, "-test.run=^TestNotDumpableChild$")
			cmd.Env = []string{secretMark, "GOS_DUMP_CHILD=1"}
			if c.set {
				cmd.Env = append(cmd.Env, "GOS_DUMP_SET=1")
			}
			cmd.Dir = dir
			cmd.SysProcAttr = nobody
			stdin, _ := cmd.StdinPipe()
			out, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { stdin.Close(); _ = cmd.Wait() }()
			sc := bufio.NewScanner(out)
			if !sc.Scan() || !strings.HasPrefix(sc.Text(), "DUMPABLE=") {
				t.Fatalf("the child: %q %v", sc.Text(), sc.Err())
			}
			if got := strings.TrimPrefix(sc.Text(), "DUMPABLE="); got != c.atExec {
				t.Errorf("dumpable at the child's start: %s, want %s", got, c.atExec)
			}
			if !sc.Scan() || sc.Text() != "READY" {
				t.Fatalf("the child: %q %v", sc.Text(), sc.Err())
			}
			for _, f := range []string{"environ", "mem"} {
				rd := exec.Command("/bin/dd", "if=/proc/"+fmt.Sprint(cmd.Process.Pid)+"/"+f, "bs=4096", "count=1", "status=none")
				if f == "mem" {
					// The first page of the binary's mapping at a fixed
					// address is not needed: opening mem is what is refused.
					rd = exec.Command("/bin/sh", "-c", "exec 3</proc/"+fmt.Sprint(cmd.Process.Pid)+"/mem && echo opened")
				}
				rd.SysProcAttr = nobody
				got, err := rd.CombinedOutput()
				readable := err == nil
				if readable != c.readable {
					t.Errorf("%s of the child read by another process of its uid: %v (%v %q), want %v", f, readable, err, got, c.readable)
				}
				if f == "environ" && readable && !strings.Contains(string(got), secretMark) {
					t.Errorf("environ read as %q, without the child's %s", got, secretMark)
				}
			}
		})
	}
}

// TestNotDumpableChild is TestNotDumpable's child (skipped otherwise): it
// prints whether it is dumpable at its start, calls NotDumpable when
// GOS_DUMP_SET is 1, prints READY and waits for its stdin to close.
func TestNotDumpableChild(t *testing.T) {
	if os.Getenv("GOS_DUMP_CHILD") != "1" {
		t.Skip("the child of TestNotDumpable")
	}
	// PR_GET_DUMPABLE: 0 when the kernel made this process not dumpable
	// at its execve (an execute-only program).
	d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if err != nil {
		fmt.Printf("DUMPABLE=%v\n", err)
		return
	}
	fmt.Printf("DUMPABLE=%v\n", d == 1)
	if os.Getenv("GOS_DUMP_SET") == "1" {
		if err := proc.NotDumpable(); err != nil {
			fmt.Printf("ERR %v\n", err)
			return
		}
	}
	fmt.Println("READY")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
}

// openDir is a new dir every user may enter (0755), removed at the test's
// end: t.TempDir's parent is root's alone.
func openDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "proc-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// copyOfTest copies this test binary into dir with mode (once per mode),
// for another user to run its child tests.
func copyOfTest(t *testing.T, dir string, mode os.FileMode) string {
	t.Helper()
	cp := filepath.Join(dir, fmt.Sprintf("proc-%o.test", mode))
	if _, err := os.Stat(cp); err == nil {
		return cp
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cp, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(cp, mode); err != nil { // below the umask too
		t.Fatal(err)
	}
	return cp
}
