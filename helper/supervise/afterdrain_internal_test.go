package supervise

import (
	"errors"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
)

// The drain's and the epilog's spans: the drain from the supervisor's stop
// to the collector's exit, marked when the collector was killed or had
// exited before; the epilog's only once told (once), from its start to the
// line's writing, its end marked unknown; both under the node's root span
// in the job's trace.
func TestAfterSpans(t *testing.T) {
	f := jobfacts.Facts{JobID: "42", Node: "n1", Cluster: "c", RestartCount: "0"}
	t0 := time.Now().Add(-time.Minute)
	p := newPhases(f, t0, t0)
	d := drainEnd{start: t0.Add(10 * time.Second), exit: t0.Add(12 * time.Second), cause: "signal terminated", exitKnown: true, clean: true}
	spans := p.afterSpans(d, t0.Add(13*time.Second))
	if len(spans) != 1 || spans[0].Name != vocab.SpanDrain || spans[0].Status != nil {
		t.Fatalf("without the epilog's word: %v", spans)
	}
	ds := spans[0]
	if string(ds.ParentSpanId) != string(p.root) || string(ds.TraceId) != string(JobTraceID(f)) ||
		ds.StartTimeUnixNano != uint64(d.start.UnixNano()) || ds.EndTimeUnixNano != uint64(d.exit.UnixNano()) ||
		!attrBool(ds, vocab.AttrEndKnown) || attr(ds, vocab.AttrDrainCause) != "signal terminated" {
		t.Errorf("drain span %v", ds)
	}
	for _, bad := range []string{"epilog start x\n", "epilog start -1\n", "epilog start 1000\n",
		"epilog start " + itoa(time.Now().Add(time.Hour).UnixMilli()) + "\n",
		"epilog start " + itoa(t0.Add(9*time.Second).UnixMilli()) + " x 0\n", "epilog start " + itoa(t0.Add(9*time.Second).UnixMilli()) + " -1 0\n"} {
		if got := p.handle(bad); got == "ok\n" {
			t.Errorf("%q taken", bad)
		}
	}
	es := t0.Add(9 * time.Second)
	// The batch script exited 3 (wait status 768); no step worse.
	if got := p.handle("epilog start " + itoa(es.UnixMilli()) + " 768 768\n"); got != "ok\n" {
		t.Fatalf("epilog start: %q", got)
	}
	if got := p.handle("epilog start " + itoa(es.Add(time.Second).UnixMilli()) + "\n"); got == "ok\n" {
		t.Errorf("a second epilog start taken")
	}
	d.killed, d.clean = true, false
	spans = p.afterSpans(d, t0.Add(13*time.Second))
	if len(spans) != 2 || spans[1].Name != vocab.SpanEpilog {
		t.Fatalf("with the epilog's word: %v", spans)
	}
	if ds = spans[0]; ds.Status.GetCode() != 2 || !attrBool(ds, vocab.AttrDrainCollectorKilled) || attr(ds, vocab.AttrDrainCause) != "epilog (signal terminated)" {
		t.Errorf("killed collector's drain: %v", ds)
	}
	e := spans[1]
	if e.StartTimeUnixNano != uint64(time.UnixMilli(es.UnixMilli()).UnixNano()) || e.EndTimeUnixNano != uint64(t0.Add(13*time.Second).UnixNano()) ||
		attrBool(e, vocab.AttrEndKnown) || !attrBool(e, vocab.AttrStartKnown) || string(e.ParentSpanId) != string(p.root) || e.Status.GetMessage() == "" {
		t.Errorf("epilog span %v", e)
	}
	if attrInt(e, vocab.AttrJobExitCode) != 3 || attrInt(e, vocab.AttrJobSignal) != 0 || attrInt(e, vocab.AttrJobDerivedExitCode) != 3 ||
		attr(e, vocab.AttrJobExitFrom) != "SLURM_JOB_EXIT_CODE" {
		t.Errorf("epilog span without the job's exit code 3: %v", e.Attributes)
	}
	d.exitKnown = false
	if ds = p.afterSpans(d, time.Now())[0]; attrBool(ds, vocab.AttrEndKnown) || ds.Status.GetCode() != 2 {
		t.Errorf("a collector gone before the drain: %v", ds)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func attrInt(s *tracev1.Span, k string) int64 {
	for _, a := range s.GetAttributes() {
		if a.GetKey() == k {
			return a.GetValue().GetIntValue()
		}
	}
	return -1
}

// The line is OTLP-JSON as the file exporter writes it (the tests' reader
// reads it): hex ids, the identity as the resource (slurm_job_restart_count
// an Int), the spans' attributes.
func TestTracesLine(t *testing.T) {
	f := jobfacts.Facts{JobID: "42", Node: "n1", Cluster: "c", RestartCount: "2", User: "alice"}
	res := &config.Resolved{}
	res.Otel.ServiceName = "gym"
	id := render.Identity(render.Input{Resolved: res, Job: render.JobOf(res, f)}, "slurm")
	p := newPhases(f, time.Now(), time.Now())
	spans := p.afterSpans(drainEnd{start: time.Now(), exit: time.Now(), cause: "record gone", exitKnown: true, killed: true}, time.Now())
	line, err := TracesLine(id, contract.PhaseScope, spans)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(line), "\n") != 1 || !strings.HasSuffix(string(line), "\n") {
		t.Fatalf("not one line: %q", line)
	}
	path := filepath.Join(t.TempDir(), "traces.jsonl")
	if err := os.WriteFile(path, line, 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := otlptest.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Spans) != 1 || d.Spans[0].Name != vocab.SpanDrain || len(d.Spans[0].TraceID) != 32 {
		t.Fatalf("read back: %+v", d.Spans)
	}
	r := d.Spans[0].Resource
	for k, v := range map[string]string{"service.name": "gym", "service.name.override": "slurm", "slurm_job_id": "42", "user": "alice",
		"host.name": "n1", render.LensJobUUID: render.LensUUID("nemo.lens.job/c/42")} {
		if got, ok := r.Str(k); !ok || got != v {
			t.Errorf("resource %s=%q, want %q", k, got, v)
		}
	}
	if !strings.Contains(string(line), `{"key":"slurm_job_restart_count","value":{"intValue":"2"}}`) ||
		!strings.Contains(string(line), `"status":{"message":`) || !strings.Contains(string(line), `"code":2`) ||
		!strings.Contains(string(line), `{"key":"slurm.drain.collector_killed","value":{"boolValue":true}}`) {
		t.Errorf("line %s", line)
	}
}

// AppendLine: a missing file is made, a partial last line gets a newline
// first (the line stays whole, its offset says where), a symbolic link and
// a FIFO are refused (no wait on the FIFO), more than one line is refused.
func TestAppendLine(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "traces.jsonl")
	off, n, err := AppendLine(path, []byte("{\"a\":1}\n"))
	if err != nil || off != 0 || n != 8 {
		t.Fatalf("new file: %d %d %v", off, n, err)
	}
	if err := os.WriteFile(path, []byte("{\"a\":1}\n{\"half"), 0o600); err != nil {
		t.Fatal(err)
	}
	off, n, err = AppendLine(path, []byte("{\"b\":2}\n"))
	b, _ := os.ReadFile(path)
	if err != nil || string(b) != "{\"a\":1}\n{\"half\n{\"b\":2}\n" || string(b[off:off+n]) != "{\"b\":2}\n" {
		t.Fatalf("after a half line: %d %d %v %q", off, n, err, b)
	}
	if _, _, err := AppendLine(path, []byte("{}\n{}\n")); err == nil {
		t.Error("two lines taken")
	}
	link := filepath.Join(dir, "link.jsonl")
	other := filepath.Join(dir, "other")
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, link); err != nil {
		t.Fatal(err)
	}
	if _, _, err := AppendLine(link, []byte("{}\n")); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("through a symbolic link: %v", err)
	}
	if b, _ := os.ReadFile(other); len(b) != 0 {
		t.Errorf("the link's target was written: %q", b)
	}
	fifo := filepath.Join(dir, "fifo.jsonl")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, _, err := AppendLine(fifo, []byte("{}\n")); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a FIFO taken")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("AppendLine waits on a FIFO")
	}
}

// The epilog tells its start on the control socket, only when the path is a
// socket of root's in a dir of root's that neither group nor others can
// write (CheckControlSocket: the prolog's listener); the phases take it.
func TestTellEpilogStart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the epilog trusts root's control socket only: run as root")
	}
	s, path := startControl(t)
	p := newPhases(jobfacts.Facts{JobID: "1", Node: "n"}, time.Now().Add(-time.Minute), time.Now())
	s.phases.Store(p)
	s.stepUID = 0
	at := time.Now().Add(-time.Second)
	// Refused: another user's socket, a dir others can write, a symbolic
	// link, a file, a relative path; each with a live listener behind.
	other, otherPath := controlListen(t)
	defer other.Close()
	if err := os.Chown(otherPath, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	open, openPath := controlListen(t)
	defer open.Close()
	if err := os.Chmod(filepath.Dir(openPath), 0o777); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(mustGetwd(t), path)
	for what, bad := range map[string]string{"another user's socket": otherPath, "a dir others can write": openPath,
		"a symbolic link": link, "a file": file, "a relative path": rel, "an abstract name": "@gym-otel-hold-00112233445566ff"} {
		if err := launch.TellEpilogStart(bad, at, nil); err == nil {
			t.Errorf("%s (%s) taken", what, bad)
		}
	}
	if !p.epilogStart.IsZero() {
		t.Fatal("the epilog's start taken from a refused telling")
	}
	// A job that exited 3 (wait status 768), one of its steps killed by
	// signal 9.
	if err := launch.TellEpilogStart(path, at, &launch.JobExit{Status: 3 << 8, Derived: 9}); err != nil {
		t.Fatal(err)
	}
	if p.epilogStart.UnixMilli() != at.UnixMilli() || p.jobExit == nil || *p.jobExit != (launch.JobExit{Status: 768, Derived: 9}) {
		t.Errorf("epilog start %v, told %v; job exit %+v", p.epilogStart, at, p.jobExit)
	}
}

func mustGetwd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// A listener that takes the line and never answers (a stopped or hostile
// supervisor) costs the epilog a bounded wait and an error, not a hang.
func TestTellEpilogStartSilent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the epilog trusts root's control socket only: run as root")
	}
	ln, path := controlListen(t)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	done := make(chan error, 1)
	t0 := time.Now()
	go func() { done <- launch.TellEpilogStart(path, time.Now(), nil) }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a silent listener counted as told")
		}
		t.Logf("a silent listener: %v after %v", err, time.Since(t0).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("launch.TellEpilogStart waits on a silent listener")
	}
}

// A supervisor of the release before the job's exit was told (it answers
// only "epilog start <ms>", and closes a line with more fields
// unanswered) still gets the epilog's start: the line is sent again
// without the exit.
func TestTellEpilogStartEarlierSupervisor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the epilog trusts root's control socket only: run as root")
	}
	ln, path := controlListen(t)
	defer ln.Close()
	lines := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 256)
			n, _ := c.Read(buf)
			line := strings.TrimSpace(string(buf[:n]))
			lines <- line
			if len(strings.Fields(line)) == 3 {
				c.Write([]byte("ok\n"))
			}
			c.Close()
		}
	}()
	at := time.UnixMilli(1_700_000_000_123)
	if err := launch.TellEpilogStart(path, at, &launch.JobExit{Status: 3 << 8}); err != nil {
		t.Fatal(err)
	}
	close(lines)
	var got []string
	for l := range lines {
		got = append(got, l)
	}
	if want := []string{"epilog start 1700000000123 768 0", "epilog start 1700000000123"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("lines %q, want %q", got, want)
	}
}
