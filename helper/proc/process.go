package proc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cleanSignalsEnv marks the one re-exec ClearSignals does.
const cleanSignalsEnv = "GYM_OTEL_SIGNALS_CLEARED"

// ClearSignals makes sure this process, and so every child it starts, runs
// with an empty signal mask and no ignored signals. An ignored signal is
// set back to its default action in place (SIG_IGN survives fork and
// execve; the raw system call, as os/signal cannot touch 32 and 33, which
// glibc reserves: the plugin's prolog hands the supervisor 32 ignored).
// A blocked one needs more: a process started under slurmstepd or srun
// inherits a blocked SIGTERM, and Go restores the mask it started with in
// every child it forks, so the only way to clear it for the children is
// to re-exec this program from a thread whose mask is cleared (execve
// keeps the calling thread's mask). It returns when nothing needed
// clearing, when only ignored signals did, or when the re-exec failed; on
// a re-exec's success the process image is replaced.
func ClearSignals() error {
	blocked, ignored, err := procSignals("self")
	if err != nil || (blocked == 0 && ignored == 0) {
		return err
	}
	if os.Getenv(cleanSignalsEnv) != "" {
		return fmt.Errorf("signals still blocked (%#x) or ignored (%#x) after re-exec", blocked, ignored)
	}
	for s := 1; s <= 64; s++ {
		if ignored&(1<<(s-1)) == 0 || s == int(syscall.SIGKILL) || s == int(syscall.SIGSTOP) {
			continue
		}
		if err := setDefaultAction(s); err != nil {
			return fmt.Errorf("signal %d: %w", s, err)
		}
	}
	if blocked == 0 {
		if _, ignored, err = procSignals("self"); err == nil && ignored != 0 {
			err = fmt.Errorf("signals still ignored (%#x)", ignored)
		}
		return err
	}
	runtime.LockOSThread()
	var empty unix.Sigset_t
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, &empty, nil); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	env := append(os.Environ(), cleanSignalsEnv+"=1")
	return syscall.Exec(exe, os.Args, env)
}

// kernelSigaction is the kernel's struct sigaction on linux/amd64 and
// linux/arm64 (handler, flags, restorer, mask).
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

// setDefaultAction sets signal s to SIG_DFL.
func setDefaultAction(s int) error {
	act := kernelSigaction{} // handler 0 is SIG_DFL
	_, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(s), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// procSignals returns the SigBlk and SigIgn masks of /proc/<pid>/status
// (bit n-1 is signal n).
func procSignals(pid string) (blocked, ignored uint64, err error) {
	data, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "SigBlk":
			blocked, _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		case "SigIgn":
			ignored, _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return blocked, ignored, nil
}

// NoCoreDumps sets RLIMIT_CORE to 0 (inherited by the collector): the token
// is in memory.
func NoCoreDumps() error {
	return unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{Cur: 0, Max: 0})
}

// NotDumpable marks this process not dumpable (prctl PR_SET_DUMPABLE 0),
// which the kernel keeps until the process's next execve: its /proc
// entries (environ, mem, fd, maps) then belong to root, and no process
// without CAP_SYS_PTRACE may trace it or take its descriptors
// (pidfd_getfd), even one of its own uid. A job's tasks run as the user
// the supervisor and the collector run as; this is what keeps the
// plugin's token, which they hold in memory, and the control socket's
// listener from the tasks. Errors: prctl's.
func NotDumpable() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}

// BecomeUser switches this process (all threads) to the user called name
// (or with that uid), with its primary group and supplementary groups
// from NSS (Credential.Become), and sets HOME and USER. Only root can; it
// is a no-op when already running as that user.
func BecomeUser(name string) error {
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return fmt.Errorf("user %q: %w", name, err)
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if os.Getuid() == uid && os.Geteuid() == uid {
		return nil
	}
	gids, err := SupplementaryGroups(u)
	if err != nil {
		return err
	}
	if err := (Credential{UID: uint32(uid), GID: uint32(gid), Groups: gids}).Become(); err != nil {
		return err
	}
	if home := u.HomeDir; home != "" {
		os.Setenv("HOME", home)
	}
	os.Setenv("USER", u.Username)
	return nil
}

// Become switches this process (all threads) to c: supplementary groups,
// then gid, then uid, and checks that the uid took. Only root can.
func (c Credential) Become() error {
	groups := make([]int, 0, len(c.Groups))
	for _, g := range c.Groups {
		groups = append(groups, int(g))
	}
	if err := syscall.Setgroups(groups); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(int(c.GID)); err != nil {
		return fmt.Errorf("setgid %d: %w", c.GID, err)
	}
	if err := syscall.Setuid(int(c.UID)); err != nil {
		return fmt.Errorf("setuid %d: %w", c.UID, err)
	}
	if os.Getuid() != int(c.UID) || os.Geteuid() != int(c.UID) {
		return fmt.Errorf("still uid %d after setuid %d", os.Geteuid(), c.UID)
	}
	return nil
}

// limitNames maps the rows of /proc/<pid>/limits to resources.
var limitNames = map[string]int{
	"Max cpu time": unix.RLIMIT_CPU, "Max file size": unix.RLIMIT_FSIZE, "Max core file size": unix.RLIMIT_CORE,
	"Max data size": unix.RLIMIT_DATA, "Max stack size": unix.RLIMIT_STACK,
	"Max resident set": unix.RLIMIT_RSS, "Max processes": unix.RLIMIT_NPROC,
	"Max open files": unix.RLIMIT_NOFILE, "Max locked memory": unix.RLIMIT_MEMLOCK,
	"Max address space": unix.RLIMIT_AS, "Max file locks": unix.RLIMIT_LOCKS,
	"Max pending signals": unix.RLIMIT_SIGPENDING, "Max msgqueue size": unix.RLIMIT_MSGQUEUE,
	"Max nice priority": unix.RLIMIT_NICE, "Max realtime priority": unix.RLIMIT_RTPRIO,
	"Max realtime timeout": unix.RLIMIT_RTTIME,
}

// ParseLimits reads the text of /proc/<pid>/limits into resource ->
// limit ("unlimited" is RLIM_INFINITY).
func ParseLimits(text string) (map[int]unix.Rlimit, error) {
	out := map[int]unix.Rlimit{}
	num := func(s string) (uint64, error) {
		if s == "unlimited" {
			return unix.RLIM_INFINITY, nil
		}
		return strconv.ParseUint(s, 10, 64)
	}
	for _, line := range strings.Split(text, "\n") {
		if len(line) < 26 {
			continue
		}
		res, ok := limitNames[strings.TrimSpace(line[:26])]
		if !ok {
			continue
		}
		f := strings.Fields(line[26:])
		if len(f) < 2 {
			return nil, fmt.Errorf("limits: %q", line)
		}
		cur, err1 := num(f[0])
		max, err2 := num(f[1])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("limits: %q", line)
		}
		out[res] = unix.Rlimit{Cur: cur, Max: max}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("limits: no known row")
	}
	return out, nil
}

// LowerToNodeLimits lowers this process's resource limits, soft and hard,
// to the node's ordinary ones (PID 1's, from /proc/1/limits) wherever they
// are higher: a supervisor started from the job prolog inherits slurmd's
// (memlock and stack often unlimited), and the collector and everything it
// starts inherit the supervisor's. Lowering needs no privilege and cannot
// be undone by the user. Limits already below the node's stay.
func LowerToNodeLimits() error {
	f, err := os.Open("/proc/1/limits")
	if err != nil {
		return fmt.Errorf("the node's resource limits: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(f, 16*1024))
	f.Close()
	if err != nil {
		return err
	}
	node, err := ParseLimits(string(data))
	if err != nil {
		return err
	}
	var errs []error
	for res, n := range node {
		var cur unix.Rlimit
		if err := unix.Getrlimit(res, &cur); err != nil {
			continue
		}
		want := unix.Rlimit{Cur: min(cur.Cur, n.Cur), Max: min(cur.Max, n.Max)}
		want.Cur = min(want.Cur, want.Max)
		if want == cur {
			continue
		}
		if err := unix.Setrlimit(res, &want); err != nil {
			errs = append(errs, fmt.Errorf("setrlimit %d: %w", res, err))
		}
	}
	return errors.Join(errs...)
}
