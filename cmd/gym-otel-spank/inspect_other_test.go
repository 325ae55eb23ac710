package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// envInspectAs makes this test binary, started again as another user, run
// `inspect DIR` and exit with its code.
const envInspectAs = "GYM_OTEL_TEST_INSPECT_DIR"

// TestInspectAnotherUsersRun: inspect run by nobody (uid 65534) on a job
// dir of root's whose jsonl files have the mode the supervisor gives them
// (0600) and whose receipt.json is readable (0644) names the file it cannot
// read, its owner and mode, says why (by design), and points at the
// readable receipt, instead of a bare "permission denied".
func TestInspectAnotherUsersRun(t *testing.T) {
	if dir := os.Getenv(envInspectAs); dir != "" {
		os.Exit(run([]string{"inspect", dir}, os.Stdout, os.Stderr))
	}
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (to run inspect as another user)")
		return
	}
	base := t.TempDir()
	for d := base; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "cli.test")
	copyFile(t, self, bin, 0o755)
	otel := filepath.Join(base, "job", "otel")
	if err := os.MkdirAll(otel, 0o755); err != nil {
		t.Fatal(err)
	}
	jsonl := filepath.Join(otel, "metrics.jsonl")
	if err := os.WriteFile(jsonl, []byte(`{"resourceMetrics":[]}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rec := filepath.Join(otel, "receipt.json")
	if err := os.WriteFile(rec, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestInspectAnotherUsersRun$")
	cmd.Env = append(os.Environ(), envInspectAs+"="+otel)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 1 {
		t.Fatalf("inspect as nobody: %v\n%s", err, out)
	}
	for _, want := range []string{
		"gym-otel: " + jsonl + ": not readable by you (uid 65534): owned by root (uid 0), mode 0600.",
		"A job's jsonl files are readable by the job's user alone, by design",
		rec + " is readable: it says what reached the files and the backend",
		"Ask root (uid 0) to run inspect",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
