package proc

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// madvDontneed is MADV_DONTNEED of Linux's madvise(2).
const madvDontneed = 4

// ReleaseStartPages unmaps the resident pages of this process's own
// read-only, private mappings of its executable (its text and read-only
// data), so that its resident set holds what it still uses, not what its
// start mapped: Go's start runs every package's init, spread over the
// binary, and the kernel maps up to 64 KiB of the page cache around each
// page faulted. For the supervisor, which lives as long as the job, that is
// most of its 13 MiB of file pages (docs/performance.md, P4).
//
// madvise MADV_DONTNEED on such a mapping drops the page table entries
// only: the pages stay in the page cache, and a page touched again is
// mapped again by a minor fault, with the same bytes. A mapping is
// released only when it is the executable's own, private, not writable,
// and holds no anonymous (copy-on-write) page. It returns the bytes of the
// mappings released; every failure leaves a mapping as it is (the
// collector does the same to itself: collector/startpages.go, a module of
// its own).
func ReleaseStartPages() int64 {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0
	}
	var n int64
	for _, m := range releasable(smaps, exe) {
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, m[0], m[1]-m[0], madvDontneed); e == 0 {
			n += int64(m[1] - m[0])
		}
	}
	return n
}

// releasable returns the [start, end) address ranges of the mappings in
// smaps (the text of /proc/PID/smaps) that ReleaseStartPages may release:
// mappings of the file exe, private, not writable, with "Anonymous: 0 kB".
func releasable(smaps []byte, exe string) [][2]uintptr {
	var out [][2]uintptr
	var cur *[2]uintptr // the current mapping, while it may qualify
	anonZero := false   // its "Anonymous: 0 kB" line was read
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if !strings.HasSuffix(f[0], ":") { // a mapping's header line
			if cur != nil && anonZero {
				out = append(out, *cur)
			}
			cur, anonZero = nil, false
			// address perms offset dev inode [path]
			if len(f) != 6 || f[5] != exe || len(f[1]) != 4 || f[1][0] != 'r' || f[1][1] != '-' || f[1][3] != 'p' {
				continue
			}
			lo, hi, ok := strings.Cut(f[0], "-")
			if !ok {
				continue
			}
			a, err1 := strconv.ParseUint(lo, 16, 64)
			b, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 != nil || err2 != nil || b <= a {
				continue
			}
			cur = &[2]uintptr{uintptr(a), uintptr(b)}
			continue
		}
		if cur != nil && f[0] == "Anonymous:" {
			anonZero = len(f) >= 2 && f[1] == "0"
			if !anonZero {
				cur = nil
			}
		}
	}
	if sc.Err() != nil {
		return nil
	}
	if cur != nil && anonZero {
		out = append(out, *cur)
	}
	return out
}
