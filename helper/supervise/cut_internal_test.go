package supervise

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

// TestCutPartialLines: a half line left by a killed collector is cut before
// the restart appends (the real crash in TestCrashRestart hits it only when
// the kill lands mid-write).
func TestCutPartialLines(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("x", 200*1024) // longer than one backward chunk
	files := map[string]struct{ in, want string }{
		"metrics.jsonl": {"{\"a\":1}\n{\"b\":2}\n{\"c\":", "{\"a\":1}\n{\"b\":2}\n"},
		"traces.jsonl":  {"{\"a\":1}\n", "{\"a\":1}\n"},
		"logs.jsonl":    {"{\"a\":1}\n{\"" + long, "{\"a\":1}\n"},
	}
	for name, f := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(f.in), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := &supervisor{out: dir, logPath: filepath.Join(dir, "collector.log"), log: logrus.New()}
	s.cutPartialLines()
	for name, f := range files {
		got, _ := os.ReadFile(filepath.Join(dir, name))
		if string(got) != f.want {
			t.Errorf("%s: %d bytes %.40q, want %q", name, len(got), got, f.want)
		}
	}
	// Only a partial half line: the file becomes empty.
	os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte("{\"half"), 0o600)
	s.cutPartialLines()
	if got, _ := os.ReadFile(filepath.Join(dir, "metrics.jsonl")); len(got) != 0 {
		t.Errorf("a lone half line left %q", got)
	}
	log, _ := os.ReadFile(s.logPath)
	if n := strings.Count(string(log), "gym-otel: removed a partial last line"); n != 3 {
		t.Errorf("collector.log has %d notes of cut lines, want 3:\n%s", n, log)
	}
}
