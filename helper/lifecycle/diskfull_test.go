package lifecycle_test

// The job's files on a file system that fills up (a quota, a full disk):
// what the file exporter could not write is counted and said, the
// producer is refused nothing because of it, and the backend still gets
// everything.

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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
	dir := sharedDir(t)
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
var realBackend = outageKind{"backend", func(t *testing.T, token string) (string, *backend) {
	be := startBackend(t, token)
	return be.url, be
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
	r := runLoad(t, realBackend, 2000, 10*time.Second, job{JobID: "2424", Output: filepath.Join(fs, "out")})
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
