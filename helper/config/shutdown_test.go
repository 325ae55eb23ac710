package config

import (
	"strings"
	"testing"
)

// TestShutdownFitsExports: the defaults hold three export timeouts; a
// site/user combination whose shutdown bound cannot is refused, naming
// both keys and the least bound; without the logs pipeline two exports
// suffice.
func TestShutdownFitsExports(t *testing.T) {
	spec := func(shutdown, export int, logs bool) *Resolved {
		r := &Resolved{Version: EncodedVersion, Otel: Defaults(), JobDir: "/j"}
		r.Otel.Endpoint, r.Otel.ServiceName = "https://otel.example", "s"
		if shutdown > 0 {
			r.Otel.ShutdownTimeoutSeconds = shutdown
		}
		if export > 0 {
			r.Otel.ExportTimeoutSeconds = export
		}
		r.Otel.GymLogs = logs
		return r
	}
	if d := Defaults(); d.MinShutdownSeconds() != 20 || d.ShutdownTimeoutSeconds < d.MinShutdownSeconds() {
		t.Fatalf("defaults: shutdown %d, need %d", d.ShutdownTimeoutSeconds, d.MinShutdownSeconds())
	}
	for _, c := range []struct {
		shutdown, export int
		logs             bool
		want             string // "" valid
	}{
		{0, 0, true, ""},
		{20, 5, true, ""},
		{19, 5, true, "otel.shutdown_timeout_seconds: 19 is too short for otel.export_timeout_seconds 5"},
		{10, 0, true, "needs 5 × 3 + 5 = 20 s"},
		{10, 0, true, "set otel.shutdown_timeout_seconds to at least 20, or otel.export_timeout_seconds to at most 1"},
		{15, 5, false, ""},
		{14, 5, false, "needs 5 × 2 + 5 = 15 s"},
		{0, 60, true, "set otel.shutdown_timeout_seconds to at least 185"},
		{5, 1, true, "at least 8"},
	} {
		_, err := spec(c.shutdown, c.export, c.logs).Validate(nil)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("shutdown %d export %d logs %v: %v", c.shutdown, c.export, c.logs, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("shutdown %d export %d logs %v: got %v, want %q", c.shutdown, c.export, c.logs, err, c.want)
		}
	}
	// At most one fix when no export timeout fits.
	_, err := spec(5, 1, true).Validate(nil)
	if err == nil || strings.Contains(err.Error(), "export_timeout_seconds to at most") {
		t.Errorf("shutdown 5: %v", err)
	}
}
