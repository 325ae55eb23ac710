package supervise_test

// The job's files on a file system that fills up (a quota, a full disk):
// what the file exporter could not write is counted and said, the
// producer is refused nothing because of it, and the backend still gets
// everything.

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
)

// mountTmpfs mounts a tmpfs of size (mount's size=, e.g. "2m") on a new
// shared dir, unmounted at the end of the test (after the processes the
// test started are gone: cleanups run last-registered first). It skips
// unless root.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root: mounts a tmpfs")
	}
	dir := harness.SharedDir(t)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0755", "gym-otel-full", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs on %s: %v: %s", dir, err, out)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			// A process of the test still holds it: detach it now, it
			// goes when that process does.
			syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	return dir
}

// realBackend is a backend that works: a real collector.
var realBackend = outageKind{"backend", func(t *testing.T, token string) (string, *harness.Backend, func()) {
	be := harness.StartBackend(t, token)
	return be.URL, be, func() {}
}}

// completeSpans counts loadgen's spans in the complete (newline-ended)
// lines of an OTLP-JSON jsonl file, and the bytes after the last newline.
func completeSpans(t testing.TB, path string) (spans, partial int64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0, 0
	}
	if err != nil {
		t.Fatal(err)
	}
	end := bytes.LastIndexByte(data, '\n') + 1
	r := bufio.NewReaderSize(bytes.NewReader(data[:end]), 1<<20)
	needle := []byte(`"name":"bench.span"`)
	for {
		line, err := r.ReadBytes('\n')
		spans += int64(bytes.Count(line, needle))
		if err != nil {
			break
		}
	}
	return spans, int64(len(data) - end)
}

// TestMeasureFullFileSystem prints what happens when the job's output dir
// is on a tmpfs that fills up while spans arrive (GYM_OTEL_MEASURE=diskfull).
func TestMeasureFullFileSystem(t *testing.T) {
	if os.Getenv("GYM_OTEL_MEASURE") != "diskfull" {
		t.Skip("set GYM_OTEL_MEASURE=diskfull to measure")
	}
	fs := mountTmpfs(t, "2m")
	r := runLoad(t, realBackend, 2000, 10*time.Second, harness.Job{JobID: "2424", Output: filepath.Join(fs, "out")})
	spans, partial := completeSpans(t, filepath.Join(r.out, "traces.jsonl"))
	t.Log(r.line())
	t.Logf("traces.jsonl: %d spans in complete lines, %d bytes after the last newline", spans, partial)
	t.Logf("receipt: %+v\n%s", r.rc, strings.Join(r.rc.Summary(), "\n"))
	out, _ := exec.Command("df", "-k", fs).CombinedOutput()
	t.Logf("df:\n%s", out)
	ls, _ := exec.Command("ls", "-la", r.out).CombinedOutput()
	t.Logf("ls:\n%s", ls)
	log, _ := os.ReadFile(filepath.Join(r.out, "collector.log"))
	t.Logf("collector.log (%d bytes), last 3000:\n%s", len(log), tailString(string(log), 3000))
	t.Logf("supervisor:\n%s", tailString(r.supLog, 4000))
}

func tailString(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// TestCollectorFullFileSystem: otel.delivery: collector, the job's output dir on a 2 MiB tmpfs, spans at a
// rate that fills it within seconds, a real backend. The file exporter's
// failures are counted, not refused to the producer (the producer's data
// still reaches the backend, which refusing would stop too); the receipt
// is written all the same (the supervisor's reserve), has final figures,
// counts exactly what traces.jsonl misses, says why, and the backend got
// every span; the supervisor's log says it once while the job runs.
func TestCollectorFullFileSystem(t *testing.T) {
	t.Parallel()
	fs := mountTmpfs(t, "2m")
	r := runLoad(t, realBackend, 2000, 10*time.Second, harness.Job{JobID: "2424", Output: filepath.Join(fs, "out")})
	spans, partial := completeSpans(t, filepath.Join(r.out, "traces.jsonl"))
	t.Log(r.line())
	t.Logf("traces.jsonl: %d spans in complete lines, %d bytes after the last newline", spans, partial)
	t.Logf("receipt:\n%s", strings.Join(r.rc.Summary(), "\n"))
	c := r.rc.Signals["traces"]
	if r.stalled || r.load.OK == 0 {
		t.Fatalf("the producer could not send (stalled %v, accepted %d)", r.stalled, r.load.OK)
	}
	if r.load.Failed != 0 {
		t.Errorf("the producer was refused %d spans (%s): a full file system must not refuse what the backend still takes", r.load.Failed, r.load.FirstErr)
	}
	if c.WriteFailed == 0 {
		t.Fatalf("receipt traces %+v: nothing failed to write, the file system did not fill (traces.jsonl %d spans)", c, spans)
	}
	if !r.rc.Complete() {
		t.Errorf("receipt basis %q, want final: %v", r.rc.Basis, r.rc.Unknown)
	}
	if c.Received != r.load.OK || c.Written+c.WriteFailed != c.Received {
		t.Errorf("receipt traces %+v: want received = %d accepted = written + write_failed", c, r.load.OK)
	}
	if spans != c.Written || partial != 0 {
		t.Errorf("traces.jsonl holds %d spans in complete lines and %d bytes of a partial one; the receipt says %d written, %d not",
			spans, partial, c.Written, c.WriteFailed)
	}
	if r.load.OK-spans != c.WriteFailed {
		t.Errorf("the producer was told %d spans were accepted, traces.jsonl misses %d, the receipt counts %d not written",
			r.load.OK, r.load.OK-spans, c.WriteFailed)
	}
	if r.backend != c.Received || c.Sent != c.Received || c.Lost() != 0 {
		t.Errorf("the backend wrote %d spans; receipt traces %+v: want every one of the %d received sent", r.backend, c, c.Received)
	}
	if !strings.Contains(r.rc.WriteTrouble, "was full") {
		t.Errorf("receipt write_trouble %q, want the file system named full", r.rc.WriteTrouble)
	}
	if s := strings.Join(r.rc.Summary(), "\n"); !strings.Contains(s, "spans not written to traces.jsonl: the file system of "+r.out+" was full") {
		t.Errorf("the receipt's summary does not say what the files miss and why:\n%s", s)
	}
	if n := strings.Count(r.supLog, "the collector cannot write the job's files"); n != 1 {
		t.Errorf("the supervisor said %d times that the files cannot be written, want once:\n%s", n, tailString(r.supLog, 3000))
	}
	// inspect puts what the files miss first, with the reason.
	ins, err := exec.Command(harness.CLI(t), "inspect", r.out).CombinedOutput()
	if err != nil {
		t.Fatalf("inspect: %v\n%s", err, ins)
	}
	head, _, _ := strings.Cut(string(ins), "\n== job")
	t.Logf("inspect, first lines:\n%s", head)
	flat := strings.Join(strings.Fields(head), " ")
	want := fmt.Sprintf("! gn7: LOST: %d spans not written to traces.jsonl: the file system of %s was full", c.WriteFailed, r.out)
	if n := strings.Count(flat, want); n != 1 {
		t.Errorf("inspect's first lines say %d times what traces.jsonl misses and why, want once:\n%s", n, head)
	}
	if strings.Contains(flat, "export problems") {
		t.Errorf("inspect repeats the state's export problems beside a final receipt:\n%s", head)
	}
	if !strings.Contains(r.supLog, "the job's files are INCOMPLETE") {
		t.Errorf("the supervisor's drain does not say the files are incomplete:\n%s", tailString(r.supLog, 3000))
	}
}
