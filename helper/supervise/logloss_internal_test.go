package supervise

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The backend exporter's lines as the collector writes them to
// collector.log (zap's console encoder, the exporter helper's messages).
const (
	retryLine = "2026-12-03T17:40:02.511Z\tinfo\tinternal/retry_sender.go:133\tExporting failed. Will retry the request after interval.\t" +
		`{"resource": {"service.name": "otelcol-gym"}, "otelcol.component.id": "otlp_http/backend", "otelcol.component.kind": "exporter", "otelcol.signal": "metrics", ` +
		`"error": "failed to make an HTTP request: Post \"http://127.0.0.1:4318/v1/metrics\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)", "interval": "1.13s"}`
	droppedLine = "2026-12-03T17:40:09.020Z\terror\tinternal/queue_sender.go:62\tExporting failed. Dropping data.\t" +
		`{"resource": {"service.name": "otelcol-gym"}, "otelcol.component.id": "otlp_http/backend", "otelcol.component.kind": "exporter", "otelcol.signal": "metrics", ` +
		`"error": "interrupted due to shutdown: failed to make an HTTP request", "dropped_items": 41}`
	rejectedLine = "2026-12-03T17:40:09.020Z\terror\tinternal/base_exporter.go:119\tExporting failed. Rejecting data.\t" +
		`{"otelcol.component.id": "otlp_http/backend", "otelcol.signal": "traces", "error": "not retryable error: Permanent error: HTTP Status Code 401", "rejected_items": 3}`
)

// TestLogShowsLoss: a retried export that then succeeded ("Will retry")
// is no loss, whatever the figures; a dropped or rejected request is one
// when some run's figures are unknown, and never read from the log when
// the figures are final (they count it). The old reading took every
// "Exporting failed" line of the backend exporter for a loss and flagged
// a job whose span the backend had (a 5 s timeout under load, retried).
func TestLogShowsLoss(t *testing.T) {
	unknown := []string{"collector run 1 sent no final figures at its shutdown (see collector.log)"}
	for _, c := range []struct {
		name    string
		lines   string
		unknown []string
		want    bool
	}{
		{"retried, figures unknown", retryLine, unknown, false},
		{"retried, figures final", retryLine, nil, false},
		{"dropped, figures unknown", retryLine + "\n" + droppedLine, unknown, true},
		{"rejected, figures unknown", rejectedLine, unknown, true},
		{"dropped, figures final", droppedLine, nil, false},
		{"no line of the backend's", "2026-12-03T17:40:00.000Z\tinfo\tservice@v0.161.0/service.go:1\tEverything is ready.", unknown, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "collector.log")
			if err := os.WriteFile(p, []byte(c.lines+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := logShowsLoss(c.unknown, p); got != c.want {
				t.Errorf("logShowsLoss = %v, want %v", got, c.want)
			}
		})
	}
	if logShowsLoss(unknown, filepath.Join(t.TempDir(), "none.log")) {
		t.Error("a log that cannot be read shows a loss")
	}
}

// TestPodmanUnshare: the command that removes what the user cannot in
// {rundir} keeps the Podman line's per-job environment and global options
// and replaces its `run` and what follows; a line of another runtime gets
// none.
func TestPodmanUnshare(t *testing.T) {
	line := []string{"env", "XDG_RUNTIME_DIR=/tmp/r", "HOME=/tmp/r", "/usr/bin/podman", "--root", "/tmp/r/storage", "--runroot", "/tmp/r/run",
		"--storage-driver=overlay", "--cgroup-manager=cgroupfs", "run", "--rm", "--network=host", "img", "/otelcol-gym", "--config", "/j/otel/collector.yaml"}
	got := strings.Join(podmanUnshare(line, []string{"/tmp/r/storage", "/tmp/r/x y"}), "|")
	want := "env|XDG_RUNTIME_DIR=/tmp/r|HOME=/tmp/r|/usr/bin/podman|--root|/tmp/r/storage|--runroot|/tmp/r/run|--storage-driver=overlay|--cgroup-manager=cgroupfs|unshare|rm|-rf|--|/tmp/r/storage|/tmp/r/x y"
	if got != want {
		t.Errorf("podmanUnshare:\n got %s\nwant %s", got, want)
	}
	for _, argv := range [][]string{
		{"apptainer", "exec", "--cleanenv", "img", "/otelcol-gym", "run"},
		{"env", "ENROOT_RUNTIME_PATH=/tmp/r", "enroot", "start", "img"},
		{"podman", "--root", "/tmp/r/storage", "images"},
	} {
		if c := podmanUnshare(argv, []string{"/tmp/r/storage"}); c != nil {
			t.Errorf("podmanUnshare(%q) = %q, want none", argv, c)
		}
	}
}
