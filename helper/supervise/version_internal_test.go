package supervise

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoggedVersion reads the version a collector logs at its start, in
// both of the collector's log encodings, from the run's own offset only.
func TestLoggedVersion(t *testing.T) {
	dir := t.TempDir()
	const earlier = "2026-01-01T00:00:00.000Z\tinfo\tservice@v0.150.0/service.go:200\tStarting otelcol-gym...\t{\"Version\": \"0.150.0\", \"NumCPU\": 2}\n"
	for _, c := range []struct {
		name, log string
		offset    int64
		found     bool
		err       string
	}{
		{"console", "2026-12-02T03:50:00.100Z\tinfo\tservice@v0.161.0/service.go:213\tStarting otelcol-gym...\t{\"resource\": {}, \"Version\": \"0.161.0-gym1\", \"NumCPU\": 2}\n", 0, true, ""},
		{"json", `{"level":"info","ts":"2026-12-02T03:50:00.100Z","msg":"Starting otelcol-gym...","Version":"0.162.1","NumCPU":2}` + "\n", 0, true, ""},
		{"old", earlier, 0, true, "is version 0.150.0; gym-otel-spank needs"},
		{"earlier run skipped", earlier + "2026-12-02T03:50:00.100Z\tinfo\tStarting otelcol-gym...\t{\"Version\": \"0.161.0\"}\n", int64(len(earlier)), true, ""},
		{"no line", "2026-12-02T03:50:00.100Z\tinfo\tEverything is ready.\n", 0, false, ""},
		{"older run only", earlier, int64(len(earlier)), false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, c.name+".log")
			if err := os.WriteFile(p, []byte(c.log), 0o600); err != nil {
				t.Fatal(err)
			}
			found, err := loggedVersion("/opt/otelcol-gym", p, c.offset)
			if found != c.found {
				t.Fatalf("found = %v, want %v", found, c.found)
			}
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("err = %v, want none", err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "otel.binary: /opt/otelcol-gym")):
				t.Fatalf("err = %v, want one naming otel.binary and %q", err, c.err)
			}
		})
	}
	if found, err := loggedVersion("/opt/otelcol-gym", filepath.Join(dir, "absent.log"), 0); found || err != nil {
		t.Fatalf("absent log: found %v, err %v; want neither", found, err)
	}
}
