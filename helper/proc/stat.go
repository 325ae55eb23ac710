package proc

import (
	"bytes"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Stat is what the plugin reads of one process from /proc/<pid>/stat
// (proc(5)).
type Stat struct {
	// State is field 3: R, S, D, Z, T, ...
	State byte
	// PPID is field 4, the parent's pid.
	PPID int
	// Pgid is field 5, the process group.
	Pgid int
	// Session is field 6, the session id.
	Session int
	// UTime and STime are fields 14 and 15: the CPU time the process has
	// spent in user and in kernel mode, in clock ticks (USER_HZ, 100 on
	// Linux).
	UTime, STime uint64
	// StartTime is field 22, clock ticks since boot: with the pid it names
	// one process for its lifetime.
	StartTime uint64
}

// ReadStat parses /proc/<pid>/stat. The command name (field 2) may hold
// spaces and parentheses, so the fields are split after the last ')'.
// Errors are the read's (os.ErrNotExist once the process is gone) or name
// the file when its format is unexpected.
func ReadStat(pid int) (Stat, error) {
	var st Stat
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, err
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return st, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(data[i+1:])) // f[0] is field 3
	if len(f) < 20 || len(f[0]) == 0 {
		return st, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	st.State = f[0][0]
	if st.PPID, err = strconv.Atoi(f[1]); err != nil {
		return st, fmt.Errorf("/proc/%d/stat: parent %q", pid, f[1])
	}
	if st.Pgid, err = strconv.Atoi(f[2]); err != nil {
		return st, fmt.Errorf("/proc/%d/stat: process group %q", pid, f[2])
	}
	if st.Session, err = strconv.Atoi(f[3]); err != nil {
		return st, fmt.Errorf("/proc/%d/stat: session %q", pid, f[3])
	}
	if st.UTime, err = strconv.ParseUint(f[11], 10, 64); err != nil {
		return st, fmt.Errorf("/proc/%d/stat: user time %q", pid, f[11])
	}
	if st.STime, err = strconv.ParseUint(f[12], 10, 64); err != nil {
		return st, fmt.Errorf("/proc/%d/stat: system time %q", pid, f[12])
	}
	if st.StartTime, err = strconv.ParseUint(f[19], 10, 64); err != nil {
		return st, fmt.Errorf("/proc/%d/stat: start time %q", pid, f[19])
	}
	return st, nil
}

// StartTime is field 22 of /proc/<pid>/stat (clock ticks since boot).
func StartTime(pid int) (uint64, error) {
	st, err := ReadStat(pid)
	return st.StartTime, err
}

// RealUID is the real uid of pid, the first field of the Uid: line of
// /proc/<pid>/status (UIDs).
func RealUID(pid int) (uint32, error) {
	ids, err := UIDs(pid)
	return ids[0], err
}

// SessionMembers returns the pids of the live (not zombie) processes of
// session sid whose real uid is uid, in /proc order.
func SessionMembers(sid int, uid uint32) []int {
	pids, err := Pids()
	if err != nil {
		return nil
	}
	var out []int
	for _, pid := range pids {
		st, err := ReadStat(pid)
		if err != nil || st.State == 'Z' || st.Session != sid {
			continue
		}
		if u, err := RealUID(pid); err == nil && u == uid {
			out = append(out, pid)
		}
	}
	return out
}

// KillSession SIGKILLs the live processes of session sid whose real uid
// is uid (SessionMembers) and returns their pids. The caller vouches that
// sid still names the session it means: a session id is not reused while
// the session has members.
func KillSession(sid int, uid uint32) []int {
	left := SessionMembers(sid, uid)
	for _, p := range left {
		_ = unix.Kill(p, unix.SIGKILL)
	}
	return left
}

// SupplementaryGroups are u's groups from NSS (getgrouplist), its primary
// group among them.
func SupplementaryGroups(u *user.User) ([]uint32, error) {
	ids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("groups of %s: %w", u.Username, err)
	}
	out := make([]uint32, 0, len(ids))
	for _, s := range ids {
		g, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("groups of %s: group id %q", u.Username, s)
		}
		out = append(out, uint32(g))
	}
	return out, nil
}

// BecomeSubreaper makes this process the reaper of its orphaned
// descendants (PR_SET_CHILD_SUBREAPER), so a collector that outlives its
// container runtime process is still seen and reaped by the supervisor.
func BecomeSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}
