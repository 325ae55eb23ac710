package supervise

import (
	"os"
	"runtime/debug"
	"sync"
	"time"
)

// StartGCPause is how long after the ready report the supervisor's garbage
// collector stays off (PauseGC): past the prolog's last steps and Slurm's
// launch of the job's first step, which the supervisor's first collection
// otherwise shares the node's CPUs with (docs/performance.md, P2).
const StartGCPause = time.Second

// StartGCLimit bounds the supervisor's heap while its collector is off:
// the runtime collects at it all the same (debug.SetMemoryLimit), as it
// would at a lower GOMEMLIMIT of the environment, which is kept. A
// supervisor's start allocates a few MiB.
const StartGCLimit = 64 << 20

// PauseGC turns the process's garbage collector off for the supervisor's
// start, unless GOGC is set in the environment (then it does nothing),
// and returns what turns it on again as it was (GOGC's percent and the
// memory limit; safe to call more than once, only the first call acts).
// Run calls it StartGCPause after the ready report (Options.ResumeGC),
// or at the drain's start when that comes first.
func PauseGC() (resume func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	percent := debug.SetGCPercent(-1)
	limit := debug.SetMemoryLimit(-1) // -1: read only
	debug.SetMemoryLimit(min(limit, StartGCLimit))
	var once sync.Once
	return func() {
		once.Do(func() {
			debug.SetGCPercent(percent)
			debug.SetMemoryLimit(limit)
		})
	}
}
