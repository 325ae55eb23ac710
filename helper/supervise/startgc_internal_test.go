package supervise

import (
	"runtime/debug"
	"testing"
)

// gcSettings reads the process's GC percent and memory limit.
func gcSettings() (percent int, limit int64) {
	percent = debug.SetGCPercent(100)
	debug.SetGCPercent(percent)
	return percent, debug.SetMemoryLimit(-1)
}

// PauseGC turns the collector off under StartGCLimit and its resume puts
// both settings back as they were, once; GOGC in the environment keeps
// the collector on.
func TestPauseGC(t *testing.T) {
	t.Setenv("GOGC", "")
	percent, limit := gcSettings()
	resume := PauseGC()
	p, l := gcSettings()
	if p != -1 || l > StartGCLimit {
		resume()
		t.Fatalf("paused: GC percent %d, memory limit %d: want -1 and at most %d", p, l, StartGCLimit)
	}
	resume()
	if p, l := gcSettings(); p != percent || l != limit {
		t.Fatalf("resumed: GC percent %d, memory limit %d: want %d and %d", p, l, percent, limit)
	}
	debug.SetGCPercent(percent + 1)
	resume() // a second call changes nothing
	if p, _ := gcSettings(); p != percent+1 {
		t.Errorf("a second resume set the GC percent to %d", p)
	}
	debug.SetGCPercent(percent)

	t.Setenv("GOGC", "100")
	PauseGC()()
	if p, l := gcSettings(); p != percent || l != limit {
		t.Errorf("with GOGC set: GC percent %d, memory limit %d: want them unchanged", p, l)
	}
}
