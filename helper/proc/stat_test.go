package proc

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestReadStatSelf(t *testing.T) {
	st, err := ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	sid, _ := unix.Getsid(0)
	if st.Pgid != syscall.Getpgrp() || st.Session != sid || st.StartTime == 0 || st.State != 'R' && st.State != 'S' {
		t.Fatalf("%+v (pgid %d, sid %d)", st, syscall.Getpgrp(), sid)
	}
	if uid, err := RealUID(os.Getpid()); err != nil || uid != uint32(os.Getuid()) {
		t.Fatalf("RealUID %d %v", uid, err)
	}
}

// A command name with spaces and parentheses must not shift the fields.
func TestReadStatHostileName(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep")
	}
	dir := t.TempDir()
	name := filepath.Join(dir, "a) (b 1 2 3")
	data, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// Start returns once the child has called setsid and exec'd.
	st, err := ReadStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if st.Session != cmd.Process.Pid || st.Pgid != cmd.Process.Pid || st.StartTime == 0 {
		t.Fatalf("%+v for pid %d", st, cmd.Process.Pid)
	}
	if m := SessionMembers(cmd.Process.Pid, uint32(os.Getuid())); len(m) != 1 || m[0] != cmd.Process.Pid {
		t.Fatalf("SessionMembers = %v", m)
	}
	if m := SessionMembers(cmd.Process.Pid, uint32(os.Getuid())+1); len(m) != 0 {
		t.Fatalf("SessionMembers of another uid = %v", m)
	}
	if _, err := ReadStat(1 << 30); !os.IsNotExist(err) {
		t.Fatalf("a pid that is gone: %v", err)
	}
}

// UTime and STime are the kernel's own counts: what times(2) says of this
// process, read just after, in the same clock ticks.
func TestReadStatCPUTimes(t *testing.T) {
	var before, now syscall.Tms
	if _, err := syscall.Times(&before); err != nil {
		t.Fatal(err)
	}
	for now.Utime-before.Utime < 20 { // 0.2 s of user time at USER_HZ 100
		if _, err := syscall.Times(&now); err != nil {
			t.Fatal(err)
		}
	}
	st, err := ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var after syscall.Tms
	if _, err := syscall.Times(&after); err != nil {
		t.Fatal(err)
	}
	if st.UTime < uint64(before.Utime)+20 || st.UTime > uint64(after.Utime) || st.STime > uint64(after.Stime) {
		t.Fatalf("stat utime %d stime %d; times(2) before %d, after %d/%d", st.UTime, st.STime, before.Utime, after.Utime, after.Stime)
	}
}
