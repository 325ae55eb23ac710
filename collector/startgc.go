// The collector's start without garbage collection, and the start's pages
// of the binary released after it (not generated: the builder rewrites
// main.go, components.go and main_*.go only).

package main

import (
	"os"
	"runtime/debug"
	"time"
)

// startGCPause is how long after main's init the garbage collector stays
// off: a collector is healthy about 0.15 s after its exec here, up to about
// 1.2 s on a loaded node. The start's pages of the binary are released at
// its end too.
const startGCPause = 2 * time.Second

// envKeepStartPages, set to 1, keeps the pages of the binary that the start
// mapped (releaseStartPages is not called): for profiling, and for the
// bench's comparison (P4M).
const envKeepStartPages = "GYM_OTEL_KEEP_START_PAGES"

// startPagesAgain is when, after main's init, the binary's pages are
// released a second time: those that only the first minutes' one-off work
// mapped (each scrape job's first scrape, the supervisor's first read of
// the collector's counters, the first collections' stack scans) go, and
// what the running collector uses comes back by minor faults.
const startPagesAgain = 30 * time.Second

// init turns the garbage collector off for the collector's start, unless
// GOGC is set in the environment, and then on again, giving what it freed
// back to the system at once (debug.FreeOSMemory), its target set by the
// allocation rate from then on (idlegc.go: 25 % idle, Go's default under
// load); then it releases the binary's pages that only the start used
// (startpages.go), and once more at startPagesAgain.
//
// Starting, the collector copies its configuration several times over
// (confmap's maps, each component's settings) while its live heap is a few
// MiB, so Go's default GOGC=100 collects several times within the start
// that the job's prolog waits for, on the one CPU the collector's cgroup
// may have. GOMEMLIMIT, which the supervisor always sets, still bounds the
// heap meanwhile: the runtime collects at the limit with GC off. Measured
// in docs/performance.md (P2, the collector's exec to healthy; P4, the
// idle memory afterwards).
func init() {
	gcOff := os.Getenv("GOGC") == ""
	if gcOff {
		debug.SetGCPercent(-1)
	}
	keep := os.Getenv(envKeepStartPages) == "1"
	time.AfterFunc(startGCPause, func() {
		if gcOff {
			debug.SetGCPercent(busyGCPercent)
			debug.FreeOSMemory()
			go tuneGC(busyGCPercent)
		}
		if !keep {
			releaseStartPages()
			time.AfterFunc(startPagesAgain-startGCPause, releaseStartPages)
		}
	})
}
