package slurmdocker

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestRPMRelease: the RPM's Release names the Slurm major.minor of the
// headers it is built against, read from this suite's own slurm_version.h
// (the headers up.sh built the plugin against).
func TestRPMRelease(t *testing.T) {
	c := need(t)
	if _, err := exec.LookPath("rpmspec"); err != nil {
		testenv.Missing(t, "rpmspec (Debian package rpm)")
	}
	out, err := exec.Command("rpmspec", "-q", "--define", "_slurm_include "+filepath.Join(c.work, "include"),
		"--qf", "%{NAME} %{RELEASE}\n", filepath.Join(here, "..", "..", "packaging", "rpm", "gym-otel-spank.spec")).CombinedOutput()
	if err != nil {
		t.Fatalf("rpmspec: %v\n%s", err, out)
	}
	mm := slurmVerRe.FindString(c.slurmVersion) // "26.05" of "26.05.5-1"
	if mm == "" {
		t.Fatalf("Slurm version %q", c.slurmVersion)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, l := range lines {
		if !strings.HasSuffix(l, " 1.slurm"+mm) {
			t.Errorf("rpmspec against Slurm %s's headers: %q, want Release 1.slurm%s", c.slurmVersion, l, mm)
		}
	}
	t.Logf("Slurm %s: %s", c.slurmVersion, strings.Join(lines, "; "))
}
