package supervise_test

import (
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
)

// TestHoldSurvivesSignalReexec: a supervisor started with ignored signals
// (a slurmd started from a shell's background job passes SIG_IGN for
// SIGINT and SIGQUIT on to its prologs) clears them (proc.ClearSignals:
// in place, or by a re-exec where signals are blocked too); the control
// socket's listener it was handed must survive that and be served.
// Before, the listener was taken first and lost in the re-exec: every
// job of such a node ran without its phase spans and with the full
// final-scrape wait.
func TestHoldSurvivesSignalReexec(t *testing.T) {
	dir := harness.SharedDir(t)
	rec := filepath.Join(dir, "record")
	if err := os.WriteFile(rec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	signal.Ignore(syscall.SIGINT) // inherited by the supervisor as SIG_IGN (Go keeps an ignored SIGINT ignored)
	s := harness.StartSup(t, harness.Job{JobID: "8282", Record: rec})
	signal.Reset(syscall.SIGINT)
	s.MustReady(t)
	if !s.Report.Control {
		t.Fatalf("the supervisor started with SIGINT ignored does not serve the control socket it was handed (%s)", s.ControlPath)
	}
}
