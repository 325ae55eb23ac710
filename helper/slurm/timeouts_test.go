package slurm

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestReadSettings: the prolog's one read of slurm.conf gives the
// timeouts (PrologTimeout over PrologEpilogTimeout, INFINITE16 no bound)
// and SrunPortRange as written; a missing file or key, zero values.
func TestReadSettings(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "slurm.conf")
	if err := os.WriteFile(conf, []byte("ClusterName=c\nPrologEpilogTimeout=120\nPrologTimeout=30 # the prolog's own\nsrunportrange = 60001-63000\nEpilogTimeout=65534\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := ReadSettings(conf)
	want := Settings{Timeouts: Timeouts{Prolog: 30 * time.Second, Epilog: 120 * time.Second}, SrunPortRange: "60001-63000"}
	if got != want {
		t.Errorf("ReadSettings = %+v, want %+v", got, want)
	}
	if ReadTimeouts(conf) != want.Timeouts {
		t.Errorf("ReadTimeouts = %+v, want %+v", ReadTimeouts(conf), want.Timeouts)
	}
	if got := ReadSettings(filepath.Join(dir, "none")); got != (Settings{}) {
		t.Errorf("a missing slurm.conf: %+v, want none", got)
	}
	if got := ReadSettings(""); got != (Settings{}) {
		t.Errorf("no SLURM_CONF: %+v, want none", got)
	}
}
