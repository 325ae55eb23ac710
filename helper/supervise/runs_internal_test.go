package supervise

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
)

// TestKeepPreviousRun: a requeued run (same job id, next restart count) and
// a resumed job (another job id, same dir) keep every earlier run's
// state.json and collector.yaml; the same run's own state is left alone.
func TestKeepPreviousRun(t *testing.T) {
	dir := t.TempDir()
	clog := filepath.Join(dir, "collector.log")
	write := func(f jobfacts.Facts, yaml string) {
		t.Helper()
		b, _ := json.Marshal(jobdir.State{Status: jobdir.StatusDrained, JobID: f.JobID, RestartCount: f.RestartCount, SLUID: f.SLUID})
		if err := os.WriteFile(filepath.Join(dir, "state.json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "collector.yaml"), []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	log := logrus.New()
	log.SetOutput(io.Discard)

	run0 := jobfacts.Facts{JobID: "41", RestartCount: "0"}
	keepPreviousRun(dir, run0, clog, log) // first run: nothing to keep
	write(run0, "run0")
	keepPreviousRun(dir, run0, clog, log) // the same run again: kept in place
	if b, _ := os.ReadFile(filepath.Join(dir, "collector.yaml")); string(b) != "run0" {
		t.Fatalf("the same run's collector.yaml moved: %q", b)
	}
	run1 := jobfacts.Facts{JobID: "41", RestartCount: "1", SLUID: "sAAAAAAAAAAA01"}
	keepPreviousRun(dir, run1, clog, log) // requeued
	write(run1, "run1")
	next := jobfacts.Facts{JobID: "42", RestartCount: "0"}
	keepPreviousRun(dir, next, clog, log) // the resume job
	write(next, "next")
	last := jobfacts.Facts{JobID: "43", RestartCount: "0"}
	keepPreviousRun(dir, last, clog, log) // the job after it
	// A previous run whose state does not say which it was, twice.
	for i := 0; i < 2; i++ {
		if err := os.WriteFile(filepath.Join(dir, "state.json"), []byte("{not json"), 0o600); err != nil {
			t.Fatal(err)
		}
		keepPreviousRun(dir, last, clog, log)
	}

	want := map[string]string{"collector.41.0.yaml": "run0", "collector.41.1.yaml": "run1", "collector.42.0.yaml": "next"}
	for name, content := range want {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != content {
			t.Errorf("%s: %q, %v (want %q)", name, b, err, content)
		}
	}
	for _, name := range []string{"state.41.0.json", "state.41.1.json", "state.42.0.json", "state.previous.json", "state.previous-2.json"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%v", err)
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "state.41.1.json"))
	if !strings.Contains(string(b), `"sluid":"sAAAAAAAAAAA01"`) {
		t.Errorf("state.41.1.json: %s", b)
	}
	marks, _ := os.ReadFile(clog)
	for _, w := range []string{"run of job 41, restart count 0\n", "run of job 41, restart count 1, SLUID sAAAAAAAAAAA01\n", "run of job 42, restart count 0\n"} {
		if !strings.Contains(string(marks), w) {
			t.Errorf("collector.log lacks %q:\n%s", w, marks)
		}
	}
	if k := runKey(jobdir.State{JobID: "4/../1", RestartCount: "0 x"}); k != "41.0x" {
		t.Errorf("runKey kept path characters: %q", k)
	}
}
