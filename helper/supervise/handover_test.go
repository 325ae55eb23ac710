package supervise_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// procLine is the value of the line of /proc/<pid>/<file> that begins
// with key, "" when there is none.
func procLine(t testing.TB, pid int, file, key string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return ""
}

// TestEarlyCollectorTakesTheRun: a supervisor started with
// launch.EnvEarlyCollector execs the real collector at its process's start
// (the CLI's constructor), and its first run hands that collector the
// run: the report names it, it is the supervisor's child in a session of
// its own, its working dir and descriptor 3 are the held output dir, its
// limits and umask are the supervisor's, its receivers take the receiver
// token from the environment handed over (which its exec's environment,
// /proc/<pid>/environ, never held), its files are written, and the drain
// ends it as any collector.
func TestEarlyCollectorTakesTheRun(t *testing.T) {
	t.Parallel()
	bin := testenv.Collector(t)
	s := harness.StartSup(t, harness.Job{JobID: "781", Env: []string{launch.EnvEarlyCollector + "=" + bin}}).MustReady(t)
	pid := s.Report.CollectorPID
	m := regexp.MustCompile(`the collector exec'd at the supervisor's start took its run \(pid (\d+)\)`).FindStringSubmatch(s.Output())
	if m == nil || m[1] != strconv.Itoa(pid) {
		t.Fatalf("the supervisor did not hand its early collector the run (report's collector %d):\n%s", pid, s.Output())
	}
	st, err := proc.ReadStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	if st.PPID != s.Cmd.Process.Pid || st.Session != pid {
		t.Errorf("the collector's parent %d and session %d, want the supervisor %d and its own %d", st.PPID, st.Session, s.Cmd.Process.Pid, pid)
	}
	sup, err := proc.ReadStat(s.Cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the collector's exec %d clock ticks after the supervisor's", st.StartTime-sup.StartTime)
	out, err := os.Stat(s.Out)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"cwd", "fd/3"} {
		if fi, err := os.Stat(fmt.Sprintf("/proc/%d/%s", pid, p)); err != nil || !os.SameFile(fi, out) {
			t.Errorf("the collector's %s is not the output dir %s (%v)", p, s.Out, err)
		}
	}
	if fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); len(fds) > 0 {
		for _, fd := range fds {
			if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); strings.HasPrefix(l, "socket:") && fd.Name() == "3" {
				t.Errorf("the hand-over socket is still the collector's descriptor 3")
			}
		}
	}
	for _, key := range []string{"Max core file size", "Max locked memory", "Max stack size"} {
		if c, w := procLine(t, pid, "limits", key), procLine(t, s.Cmd.Process.Pid, "limits", key); c != w {
			t.Errorf("the collector's %q is %q, the supervisor's %q", key, c, w)
		}
	}
	// Open files: the hard limit the supervisor's, the soft one at it (as
	// the Go runtime sets it at a start).
	c, w := strings.Fields(procLine(t, pid, "limits", "Max open files")), strings.Fields(procLine(t, s.Cmd.Process.Pid, "limits", "Max open files"))
	if len(c) < 2 || len(w) < 2 || c[1] != w[1] || c[0] != c[1] {
		t.Errorf("the collector's open files limits are %q, the supervisor's %q", c, w)
	}
	if u := procLine(t, pid, "status", "Umask:"); u != "0077" {
		t.Errorf("the collector's umask is %q, want 0077", u)
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	if string(env) != launch.EnvHandover+"=3\x00GOGC=off\x00" {
		t.Errorf("the collector's exec environment is %q, want only %s and GOGC=off", env, launch.EnvHandover)
	}

	if code := httpExport(t, s.Report.Ports.OTLPHTTP, "Bearer "+s.ReceiverToken); code != http.StatusOK {
		t.Errorf("OTLP/HTTP with the receiver token: HTTP %d, want 200", code)
	}
	if code := httpExport(t, s.Report.Ports.OTLPHTTP, "Bearer wrong"); code != http.StatusUnauthorized {
		t.Errorf("OTLP/HTTP with a wrong token: HTTP %d, want 401", code)
	}
	if _, err := s.Drain(t, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	s.AssertGone(t)
	assertAllParse(t, s.Out)
	log, _ := os.ReadFile(filepath.Join(s.Out, "collector.log"))
	if !strings.Contains(string(log), "Everything is ready") {
		t.Errorf("collector.log has not the collector's own lines:\n%s", log)
	}
}

// TestEarlyCollectorNotTaken: an early exec whose process does not take
// the run (it exits at once; or it is another binary than otel.binary, so
// it must not be given the run) is ended and the collector started anew:
// the start is ready, and no process of the early exec is left.
func TestEarlyCollectorNotTaken(t *testing.T) {
	t.Parallel()
	bin := testenv.Collector(t)
	other := filepath.Join(t.TempDir(), "otelcol-gym")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, data, 0o755); err != nil {
		t.Fatal(err)
	}
	// A collector that exits when exec'd early, as one without the
	// hand-over does (it has no configuration), and runs when exec'd with
	// its run.
	exits := filepath.Join(t.TempDir(), "otelcol-gym")
	script := fmt.Sprintf("#!/bin/sh\n[ -n \"$%s\" ] && exit 1\nexec %s \"$@\"\n", launch.EnvHandover, bin)
	if err := os.WriteFile(exits, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, binary, early, says string }{
		{"exits", exits, exits, "it exited at the hand-over"},
		{"another binary", bin, other, "it was exec'd as"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := harness.StartSup(t, harness.Job{JobID: "782", Binary: c.binary, Env: []string{launch.EnvEarlyCollector + "=" + c.early}}).MustReady(t)
			if !strings.Contains(s.Output(), "did not take its run ("+c.says) {
				t.Fatalf("the supervisor does not say why it started the collector anew (%q):\n%s", c.says, s.Output())
			}
			if st, err := proc.ReadStat(s.Report.CollectorPID); err != nil || st.PPID != s.Cmd.Process.Pid {
				t.Errorf("the collector started anew is not the supervisor's child (%v)", err)
			}
			if code := httpExport(t, s.Report.Ports.OTLPHTTP, "Bearer "+s.ReceiverToken); code != http.StatusOK {
				t.Errorf("OTLP/HTTP with the receiver token: HTTP %d, want 200", code)
			}
			if left := processesOf(other); len(left) > 0 {
				t.Errorf("processes of the early exec are left: %v", left)
			}
			if _, err := s.Drain(t, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			s.AssertGone(t)
		})
	}
}

// TestEarlyCollectorEndsWithAFailedStart: a supervisor whose start fails
// before its collector's run (its output dir cannot be made) leaves no
// process of its early exec behind.
func TestEarlyCollectorEndsWithAFailedStart(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "otelcol-gym")
	data, err := os.ReadFile(testenv.Collector(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := harness.StartSup(t, harness.Job{JobID: "783", Binary: bin, Output: filepath.Join(blocker, "out"), Env: []string{launch.EnvEarlyCollector + "=" + bin}})
	if s.Report.Status != launch.StatusFailed {
		t.Fatalf("the start under a file did not fail: %+v", s.Report)
	}
	harness.WaitFor(t, 10*time.Second, "no process of the early exec", func() bool { return len(processesOf(bin)) == 0 })
}

// processesOf lists the live processes whose executable is exe.
func processesOf(exe string) []int {
	return harness.LiveProcesses(func(pid int) bool {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		return err == nil && l == exe
	})
}
