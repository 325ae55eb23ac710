package proc

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// deletedSuffix is what the kernel appends to /proc/<pid>/exe when the
// file the process runs was removed or replaced (a package upgrade).
const deletedSuffix = " (deleted)"

// ExePath is the path of the program pid runs (/proc/<pid>/exe), without
// the " (deleted)" suffix the kernel adds once that file was replaced: the
// path, not the file. Errors: no such process, or os.ErrPermission when the
// caller may not read it (another user's process, unless root).
func ExePath(pid int) (string, error) {
	p, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(p, deletedSuffix), nil
}

// UIDs are the real, effective, saved and filesystem uids of pid, the Uid:
// line of /proc/<pid>/status (readable by every user).
func UIDs(pid int) ([4]uint32, error) {
	var ids [4]uint32
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ids, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
			fs := strings.Fields(rest)
			if len(fs) != 4 {
				break
			}
			for i, s := range fs {
				u, err := strconv.ParseUint(s, 10, 32)
				if err != nil {
					return ids, fmt.Errorf("/proc/%d/status: Uid %q", pid, rest)
				}
				ids[i] = uint32(u)
			}
			return ids, nil
		}
	}
	return ids, fmt.Errorf("/proc/%d/status: no Uid line with four uids", pid)
}

// RunsAsRoot reports whether every uid of pid is 0: a process no
// unprivileged user can make.
func RunsAsRoot(pid int) bool {
	ids, err := UIDs(pid)
	return err == nil && ids == [4]uint32{}
}
