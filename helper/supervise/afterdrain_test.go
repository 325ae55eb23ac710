package supervise_test

import (
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/timing"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
)

// TestDrainSpanCollectorKilled: a supervisor started with a record (as by
// the plugin's prolog) whose collector hangs at the drain (SIGSTOP) kills
// it at shutdown_timeout_seconds, and the drain still ends: one
// slurm.drain span, appended to traces.jsonl after the collector's exit
// with the run's identity, marked collector_killed with an error status,
// together with the node's slurm.job span the hung collector did not
// accept; no slurm.epilog (no epilog told its start); their span metrics
// appended to metrics.jsonl; the receipt lists both lines.
func TestDrainSpanCollectorKilled(t *testing.T) {
	t.Parallel()
	rec := filepath.Join(harness.SharedDir(t), "record")
	if err := os.WriteFile(rec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := harness.StartSup(t, harness.Job{JobID: "8383", Record: rec}).MustReady(t)
	time.Sleep(1500 * time.Millisecond) // a phase export or two
	if err := syscall.Kill(s.Report.CollectorPID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	took, err := s.Drain(t, 2*time.Minute)
	t.Logf("drained in %v: %v", took.Round(time.Millisecond), err)
	for _, l := range strings.Split(s.Output(), "\n") {
		if strings.Contains(l, "phase spans") {
			t.Log(l)
		}
	}
	if err == nil {
		t.Errorf("a collector killed at the drain gave a clean exit:\n%s", s.Output())
	}
	d, rerr := otlptest.Read(filepath.Join(s.Out, "traces.jsonl"))
	if rerr != nil {
		t.Fatal(rerr)
	}
	var drain []otlptest.Span
	jobSpans := 0
	for _, sp := range d.Spans {
		switch sp.Name {
		case vocab.SpanJob:
			jobSpans++
		case vocab.SpanDrain:
			drain = append(drain, sp)
		case vocab.SpanEpilog:
			t.Errorf("an epilog span without an epilog: %+v", sp)
		}
	}
	// The job's span is made at the drain; the hung collector does not
	// take it, so it goes into the appended line (said in the log).
	refused := strings.Contains(s.Output(), "phase spans the collector did not accept are appended")
	if len(drain) != 1 || jobSpans > 1 || refused != (jobSpans == 1) {
		t.Fatalf("%d slurm.drain and %d slurm.job spans in traces.jsonl (refused spans appended: %v), want one drain span and the job's span with the refused ones", len(drain), jobSpans, refused)
	}
	a := drain[0].Attributes.Text()
	if a[vocab.AttrDrainCollectorKilled] != "true" || a[vocab.AttrDrainClean] != "false" || a[vocab.AttrEndKnown] != "true" ||
		a[vocab.AttrDrainCause] != "signal terminated" {
		t.Errorf("drain span attributes %v", a)
	}
	if id, _ := drain[0].Resource.Str("slurm_job_id"); id != "8383" {
		t.Errorf("drain span resource %v", drain[0].Resource.Text())
	}
	rc, err := receipt.Read(s.Out)
	if err != nil {
		t.Fatal(err)
	}
	// The appended spans' span metrics: calls and duration of each
	// series (slurm.drain with its error status, slurm.job).
	if len(rc.Appended) != 2 || rc.Appended[0].Spans != 1+jobSpans || rc.Appended[0].File != "traces.jsonl" ||
		rc.Appended[1].File != "metrics.jsonl" || rc.Appended[1].Points != 2*(1+jobSpans) {
		t.Errorf("receipt appended %+v", rc.Appended)
	}
	m, rerr := otlptest.Read(filepath.Join(s.Out, "metrics.jsonl"))
	if rerr != nil {
		t.Fatal(rerr)
	}
	calls, hist := spanCalls(m)
	if calls[vocab.SpanDrain] != 1 || hist[vocab.SpanDrain] != 1 || calls[vocab.SpanJob] != float64(jobSpans) {
		t.Errorf("metrics.jsonl: span metrics calls %v, duration counts %v; want slurm.drain 1 and slurm.job %d", calls, hist, jobSpans)
	}
}

// TestCollectorDrainSpansDelivered: with otel.delivery: collector (with
// the default delivery from the files the sender delivers the appended
// lines from the files: filedelivery_test.go), right after appending the
// drain's line, the supervisor sends it to the job's backend itself, once: a backend that
// takes it (the real collector with bearer auth) holds the slurm.drain
// span and the receipt says delivered; a hung backend (accepts, never
// answers) costs at most timing.DeliveryBound and the receipt says why
// not; a backend answering 401 gives that status in the receipt.
func TestCollectorDrainSpansDelivered(t *testing.T) {
	t.Parallel()
	const token = "deliver-token"
	for _, c := range []struct {
		name, mode string
		status     int
	}{{"backend", "", 0}, {"hung", "hang", 0}, {"401", "401", 401}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var be *harness.Backend
			var endpoint string
			if c.mode == "" {
				be = harness.StartBackend(t, token)
				endpoint = be.URL
			} else {
				endpoint = harness.StartBlackhole(t, c.mode)
			}
			rec := filepath.Join(harness.SharedDir(t), "record")
			if err := os.WriteFile(rec, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			s := harness.StartSup(t, harness.Job{JobID: "8484", Record: rec, Endpoint: endpoint, Token: token, Site: "  delivery: collector\n"}).MustReady(t)
			time.Sleep(time.Second)
			took, err := s.Drain(t, 2*time.Minute)
			t.Logf("drained in %v: %v", took.Round(time.Millisecond), err)
			var line, sent string
			for _, l := range strings.Split(s.Output(), "\n") {
				if strings.Contains(l, "appended phase spans") {
					line = l
					t.Log(l)
				}
				if strings.Contains(l, "appended lines (2) delivered") {
					sent = l
					t.Log(l)
				}
			}
			rc, err := receipt.Read(s.Out)
			if err != nil {
				t.Fatal(err)
			}
			// The spans' line and the span metrics' line (the drain's
			// span's, and those of the phase spans the connector had not
			// exported a second after the start: calls and duration of
			// each series), delivered together.
			if len(rc.Appended) != 2 || rc.Appended[0].File != "traces.jsonl" || rc.Appended[1].File != "metrics.jsonl" ||
				rc.Appended[1].Points < 2 || rc.Appended[1].Points%2 != 0 {
				t.Fatalf("receipt appended %+v: want the traces.jsonl line and the metrics.jsonl line of calls and duration of each series", rc.Appended)
			}
			for _, a := range rc.Appended {
				t.Logf("receipt: %+v", a)
			}
			if c.mode == "" {
				// The supervisor's own requests: no second collector.
				if !strings.Contains(sent, "(one request each, no second collector)") {
					t.Errorf("supervisor's log: %q, want the appended lines delivered in one request each, no second collector", sent)
				}
				for _, a := range rc.Appended {
					if !a.Delivered || a.Cause != "" || a.HTTPStatus != 0 {
						t.Errorf("not delivered to a working backend: %+v\n%s", a, s.Output())
					}
				}
				harness.WaitFor(t, 10*time.Second, "the drain span and its span metrics at the backend", func() bool {
					d, err := otlptest.Read(filepath.Join(be.Dir, "traces.jsonl"))
					if err != nil || d.SpanCount(vocab.SpanDrain) != 1 {
						return false
					}
					m, err := otlptest.Read(filepath.Join(be.Dir, "metrics.jsonl"))
					if err != nil {
						return false
					}
					calls, hist := spanCalls(m)
					return calls[vocab.SpanDrain] == 1 && hist[vocab.SpanDrain] == 1
				})
				be.Stop(t)
				assertCallsMatchSpans(t, "the backend", otlptest.MustRead(t, be.Dir, "traces"), otlptest.MustRead(t, be.Dir, "metrics"))
				return
			}
			for _, a := range rc.Appended {
				if a.Delivered || a.Cause == "" || a.HTTPStatus != c.status {
					t.Errorf("%s backend: receipt %+v, want not delivered with a cause and HTTP status %d", c.name, a, c.status)
				}
			}
			// The bound: the supervisor logs the attempt's time (the
			// collector's kill at the bound included).
			ms := -1
			if i := strings.Index(line, "attempt of "); i >= 0 {
				fmt.Sscanf(line[i+len("attempt of "):], "%d", &ms)
			}
			if ms < 0 || time.Duration(ms)*time.Millisecond > timing.DeliveryBound+500*time.Millisecond {
				t.Errorf("the delivery took %d ms, its bound is %v: %q", ms, timing.DeliveryBound, line)
			}
			if !strings.Contains(strings.Join(rc.Summary(), "\n"), "NOT delivered") {
				t.Errorf("summary %q", rc.Summary())
			}
		})
	}
}

// TestDrainDeliveryPerLine: each appended line is its own request and has
// its own outcome in the receipt: a backend that takes traces and refuses
// metrics (400) leaves the traces line delivered (so that `replay
// --appended` never sends it twice) and the metrics line not, with the
// status and the backend's words.
func TestDrainDeliveryPerLine(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/v1/metrics" {
			http.Error(w, "metrics refused here", http.StatusBadRequest)
			return
		}
		io.WriteString(w, `{}`)
	}))
	defer srv.Close()
	rec := filepath.Join(harness.SharedDir(t), "record")
	if err := os.WriteFile(rec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := harness.StartSup(t, harness.Job{JobID: "8485", Record: rec, Endpoint: srv.URL, Token: "per-line", Site: "  delivery: collector\n"}).MustReady(t)
	time.Sleep(time.Second)
	if _, err := s.Drain(t, 2*time.Minute); err != nil {
		t.Fatalf("drain: %v\n%s", err, s.Output())
	}
	rc, err := receipt.Read(s.Out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rc.Appended) != 2 || rc.Appended[0].File != "traces.jsonl" || rc.Appended[1].File != "metrics.jsonl" {
		t.Fatalf("receipt appended %+v: want the traces.jsonl line and the metrics.jsonl line", rc.Appended)
	}
	if a := rc.Appended[0]; !a.Delivered || a.Cause != "" || a.HTTPStatus != 0 {
		t.Errorf("the traces line, which the backend took: %+v, want delivered", a)
	}
	if a := rc.Appended[1]; a.Delivered || a.HTTPStatus != 400 || !strings.Contains(a.Cause, "HTTP 400 Bad Request: metrics refused here") {
		t.Errorf("the metrics line, which the backend refused: %+v, want not delivered, 400 and the backend's words", a)
	}
}
