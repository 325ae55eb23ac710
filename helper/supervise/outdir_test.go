package supervise_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
)

// swapJobDir makes a job dir of the job's user (gymuser when run as root)
// that nobody can write too (mode 0777, as a group-writable project dir
// without the sticky bit), and an attacker's dir of nobody's.
func swapJobDir(t *testing.T) (job, attacker, userName string) {
	t.Helper()
	d := harness.SharedDir(t)
	job, attacker = filepath.Join(d, "job"), filepath.Join(d, "attacker")
	for _, p := range []string{job, attacker} {
		if err := os.Mkdir(p, 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, 0o777)
	}
	os.Chown(attacker, 65534, 65534)
	if os.Getuid() == 0 {
		u := ensureGymUser(t)
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		os.Chown(job, uid, gid)
		userName = "gymuser"
	}
	return job, attacker, userName
}

// assertNothingIn fails unless dir is empty.
func assertNothingIn(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("the attacker's dir got %s", e.Name())
	}
}

// TestOutputDirSwapAfterStart: once the supervisor holds the output dir,
// a rename of otel and a link to another user's dir in its place redirect
// nothing: the running collector, its restart after a kill (the same held
// dir) and the drain (state.json, receipt.json, the appended phase spans,
// collector.log) all write into the renamed dir; the other dir gets no
// byte. The collector runs with its configuration by content
// (render.ConfigEnv), its files under the inherited descriptor 3.
func TestOutputDirSwapAfterStart(t *testing.T) {
	t.Parallel()
	job, attacker, userName := swapJobDir(t)
	out := filepath.Join(job, "otel")
	s := harness.StartSup(t, harness.Job{JobID: "6106", User: userName, Output: out, VLLMPort: harness.StartVLLM(t)}).MustReady(t)
	t.Logf("start steps (ms): %s", s.Report.Steps)
	if s.Report.OutputDir != out {
		t.Errorf("report names output dir %q, want %q", s.Report.OutputDir, out)
	}
	cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(s.Report.CollectorPID) + "/cmdline")
	if !bytes.HasSuffix(cmdline, []byte("\x00--config\x00env:"+render.ConfigEnv+"\x00")) {
		t.Errorf("collector argv %q: want its configuration by content", bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
	}
	if to, err := os.Readlink("/proc/" + strconv.Itoa(s.Report.CollectorPID) + "/fd/3"); err != nil || to != out {
		t.Errorf("collector fd 3 -> %q (%v), want the output dir %s", to, err, out)
	}
	if n := strings.Count(s.Output(), "writable by other users: "+job+" (mode 0777)"); n != 1 {
		t.Errorf("the job dir others can write is warned %d times, want once:\n%s", n, s.Output())
	}
	kept, _ := os.ReadFile(filepath.Join(out, jobdir.ConfigFile))
	if !bytes.Contains(kept, []byte("path: "+filepath.Join(out, "metrics.jsonl"))) || bytes.Contains(kept, []byte("/proc/self/fd")) {
		t.Errorf("collector.yaml does not keep the real paths:\n%s", kept)
	}
	harness.WaitFor(t, 20*time.Second, "a line in metrics.jsonl", func() bool {
		data, _ := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
		return bytes.Count(data, []byte("\n")) >= 1
	})

	moved := filepath.Join(job, "otel.moved")
	if err := os.Rename(out, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(attacker, out); err != nil {
		t.Fatal(err)
	}
	os.Lchown(out, 65534, 65534)
	before, _ := os.ReadFile(filepath.Join(moved, "metrics.jsonl"))

	old := s.Report.CollectorPID
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var st jobdir.State
	harness.WaitFor(t, 20*time.Second, "a restarted, ready collector (state.json in the renamed dir)", func() bool {
		var err error
		if st, err = jobdir.ReadState(moved); err != nil {
			return false
		}
		return st.Restarts == 1 && st.Status == jobdir.StatusReady && st.CollectorPID != 0 && st.CollectorPID != old
	})
	if to, err := os.Readlink("/proc/" + strconv.Itoa(st.CollectorPID) + "/fd/3"); err != nil || to != moved {
		t.Errorf("restarted collector fd 3 -> %q (%v), want the renamed dir %s", to, err, moved)
	}
	harness.WaitFor(t, 20*time.Second, "new lines in the renamed dir's metrics.jsonl", func() bool {
		data, _ := os.ReadFile(filepath.Join(moved, "metrics.jsonl"))
		return bytes.Count(data, []byte("\n")) >= bytes.Count(before, []byte("\n"))+2
	})
	if _, err := s.Drain(t, 30*time.Second); err != nil {
		t.Fatalf("drain: %v\n%s", err, s.Output())
	}
	assertNothingIn(t, attacker)
	rc, err := receipt.Read(moved)
	if err != nil {
		t.Fatalf("the receipt is not in the renamed dir: %v", err)
	}
	if rc.Collectors != 2 {
		t.Errorf("receipt: %d collector runs, want 2", rc.Collectors)
	}
	if st, err := jobdir.ReadState(moved); err != nil || st.Status != jobdir.StatusDrained {
		t.Errorf("state.json in the renamed dir: %+v %v", st, err)
	}
	log, _ := os.ReadFile(filepath.Join(moved, "collector.log"))
	if !bytes.Contains(log, []byte("gym-otel: the collector exited unexpectedly")) {
		t.Error("the restart is not logged in the renamed dir's collector.log")
	}
	assertAllParse(t, moved)
	harness.AssertNoLeak(t, s.Job.Token, moved, map[string]string{"the supervisor's output": s.Output()})
}

// TestOutputDirLinkRefused: an otel that is a link (to another user's
// dir), another user's otel, and an otel others can write are refused
// before anything is written: the report names the path, the owner and
// why; the other dir gets nothing.
func TestOutputDirLinkRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		prepare func(out, attacker string)
		mention []string
	}{
		{"link", func(out, attacker string) { os.Symlink(attacker, out); os.Lchown(out, 65534, 65534) },
			[]string{"is a symbolic link", "nobody (uid 65534)", "refusing to follow it"}},
		{"another user's dir", func(out, attacker string) { os.Mkdir(out, 0o777); os.Chmod(out, 0o777); os.Chown(out, 65534, 65534) },
			[]string{"is owned by nobody (uid 65534)"}},
		{"group-writable", func(out, attacker string) {
			os.Mkdir(out, 0o770)
			os.Chmod(out, 0o770)
			if u, err := os.Stat(filepath.Dir(out)); err == nil {
				st := u.Sys().(*syscall.Stat_t)
				os.Chown(out, int(st.Uid), int(st.Gid))
			}
		}, []string{"group- or other-writable (mode 0770)"}},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			job, attacker, userName := swapJobDir(t)
			out := filepath.Join(job, "otel")
			c.prepare(out, attacker)
			s := harness.StartSup(t, harness.Job{JobID: "6107", User: userName, Output: out, Health: 5})
			assertFailed(t, s, append([]string{out}, c.mention...)...)
			assertNothingIn(t, attacker)
			if c.name != "link" {
				if ents, _ := os.ReadDir(out); len(ents) > 0 {
					t.Errorf("the refused dir got %d entries", len(ents))
				}
			}
		})
	}
}
