package cgroup

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// StartInside starts cmd so that it is born inside the group in every
// hierarchy, without the calling process ever entering it:
//   - the v2 (unified) directory through clone3 with CLONE_INTO_CGROUP
//     (Go's SysProcAttr.UseCgroupFD; Linux 5.7 or later): only the child
//     is ever in it;
//   - the v1 directories through the calling thread alone: its thread id
//     is written to each directory's tasks file before the fork and back
//     to where it was right after (v1 places threads one by one; a child
//     is born where the thread that forks it is). No other thread of the
//     process, the one slurmstepd runs on included, is ever in the group.
//
// Where clone3 cannot place it (a kernel before 5.7), the process joins
// the v2 directory around the fork (cgroup.procs) and leaves it right
// after. A failed leave is fatal: the child is killed and reaped, and the
// error says so. The caller must run StartInside on a goroutine locked to
// its OS thread (runtime.LockOSThread) that never unlocks it: the thread,
// the only one ever in the group, ends with its goroutine and is never
// reused. cmd.SysProcAttr is kept (UseCgroupFD and CgroupFD are set).
func (g *Group) StartInside(cmd *exec.Cmd) error {
	var v1 []dir
	var v2 *dir
	for i := range g.dirs {
		if g.dirs[i].h.Version == V2 {
			v2 = &g.dirs[i]
		} else {
			v1 = append(v1, g.dirs[i])
		}
	}
	leaveV1, err := joinThread(v1)
	if err != nil {
		return err
	}
	leaveV2 := func() error { return nil }
	startErr := func() error {
		if v2 == nil {
			return cmd.Start()
		}
		if !CloneIntoCgroup() {
			var err error
			if leaveV2, err = joinProcessV2(*v2); err != nil {
				return err
			}
			return cmd.Start()
		}
		fd, err := unix.Open(v2.path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("cgroup %s: %w", v2.path, err)
		}
		defer unix.Close(fd)
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
		return cmd.Start()
	}()
	if lerr := errors.Join(leaveV2(), leaveV1()); lerr != nil {
		if startErr == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		return fmt.Errorf("leaving the job's cgroup after the fork failed, so the start is refused: %w", lerr)
	}
	return startErr
}

// CloneIntoCgroup reports whether this kernel places a child into a v2
// cgroup at clone3 (CLONE_INTO_CGROUP, Linux 5.7).
func CloneIntoCgroup() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	rel := unix.ByteSliceToString(u.Release[:])
	maj, rest, _ := strings.Cut(rel, ".")
	minS, _, _ := strings.Cut(rest, ".")
	ma, err1 := strconv.Atoi(maj)
	mi, err2 := strconv.Atoi(strings.TrimRightFunc(minS, func(r rune) bool { return r < '0' || r > '9' }))
	return err1 == nil && err2 == nil && (ma > 5 || ma == 5 && mi >= 7)
}

// joinThread moves the calling OS thread alone into the v1 directories ds
// (their tasks files) and returns how to move it back (on the same
// thread).
//
// It writes "0", the writing thread, not its id: for a single thread
// named so, the kernel's cgroup_procs_write_start skips the global
// cgroup_threadgroup_rwsem, whose write lock waits for an RCU grace
// period at each migration (where the kernel has that shortcut; the same
// move where it has not).
func joinThread(ds []dir) (leave func() error, err error) {
	none := func() error { return nil }
	if len(ds) == 0 {
		return none, nil
	}
	const tid = "0"
	data, err := readBounded("/proc/thread-self/cgroup", 64*1024)
	if err != nil {
		return nil, err
	}
	self := parseProcCgroup(data)
	var back []string
	leave = func() error {
		var errs []error
		for _, f := range back {
			if err := write(f, tid); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	for _, d := range ds {
		cur, ok := self.pathIn(d.h)
		if !ok {
			_ = leave()
			return nil, fmt.Errorf("cgroup %s: this thread's place in it is unknown", d.h.Mount)
		}
		if err := write(filepath.Join(d.path, "tasks"), tid); err != nil {
			_ = leave()
			return nil, err
		}
		back = append(back, filepath.Join(d.h.Mount, cur, "tasks"))
	}
	return leave, nil
}

// joinProcessV2 moves the whole process into the v2 directory d (v2
// places processes, not threads) and returns how to move it back.
func joinProcessV2(d dir) (leave func() error, err error) {
	self, err := ProcCgroups("self")
	if err != nil {
		return nil, err
	}
	if !self.hasV2 {
		return nil, fmt.Errorf("cgroup %s: this process's place in it is unknown", d.h.Mount)
	}
	pid := strconv.Itoa(os.Getpid())
	if err := write(filepath.Join(d.path, "cgroup.procs"), pid); err != nil {
		return nil, err
	}
	return func() error { return write(filepath.Join(d.h.Mount, self.V2, "cgroup.procs"), pid) }, nil
}
