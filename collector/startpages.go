// The binary's pages that only the collector's start used, released (not
// generated).

package main

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

// releaseStartPages unmaps the resident pages of the collector's own
// read-only, private file mappings (its text and read-only data), so that
// its resident set holds the code and data it still uses, not the start's.
//
// A Go binary's start runs the init functions of its ~1,800 packages, spread
// over the whole text, and the kernel maps up to 64 KiB of the page cache
// around each page faulted (fault-around; on Linux 6.18, a whole large folio
// where the page cache holds the file in one, as it does the Go linker's
// output: docs/performance.md, P4): about 30 MiB of text and 37 MiB
// of read-only data are resident after the start, of which the running
// collector touches about 11 and 30 (docs/performance.md, P4). madvise
// MADV_DONTNEED on a private file mapping drops the process's page table
// entries only: the pages stay in the page cache (shared with every other
// collector on the node, reclaimable by the kernel), and a page touched
// again is mapped again by a minor fault, with the same bytes.
//
// A mapping is released only when it is the executable's own, private, not
// writable, and holds no anonymous (copy-on-write) page: its contents are
// then exactly the file's, so nothing the process wrote can be lost (a
// relocated read-only segment of a position-independent binary holds
// anonymous pages and is skipped). Every failure leaves the mapping as it
// is: the release is an optimisation, never a condition of the collector's
// work.
func releaseStartPages() {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return
	}
	for _, m := range releasable(smaps, exe) {
		_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, m[0], m[1]-m[0], madvDontneed)
	}
}

// releasable returns the [start, end) address ranges of the mappings in
// smaps (the text of /proc/PID/smaps) that releaseStartPages may release:
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
