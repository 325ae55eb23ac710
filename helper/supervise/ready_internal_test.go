package supervise

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// healthServer is a health endpoint on loopback that answers 200 once
// ready is set, 503 before; it counts the requests.
type healthServer struct {
	port  int
	ready atomic.Bool
	asked atomic.Int32
}

func newHealthServer(t *testing.T) *healthServer {
	t.Helper()
	h := &healthServer{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.port = ln.Addr().(*net.TCPAddr).Port
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.asked.Add(1)
		if h.ready.Load() {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return h
}

// noRecheck makes the log's line the only way out of the wait on the log.
func noRecheck(t *testing.T) {
	old := readyRecheck
	readyRecheck = time.Hour
	t.Cleanup(func() { readyRecheck = old })
}

func appendFile(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}

// The log's ready line ends the wait, with no poll at all (poll and
// recheck an hour), also when the line arrives in two writes.
func TestWaitHealthyOnTheLogsLine(t *testing.T) {
	noRecheck(t)
	for _, split := range []bool{false, true} {
		h := newHealthServer(t)
		log := filepath.Join(t.TempDir(), "collector.log")
		appendFile(t, log, "2026-12-06T06:18:17.191Z\tinfo\tStarting otelcol-gym...\n")
		fi, _ := os.Stat(log)
		done := make(chan error, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		go func() { done <- waitHealthy(ctx, make(chan struct{}), h.port, time.Hour, log, fi.Size()) }()
		time.Sleep(100 * time.Millisecond)
		appendFile(t, log, "2026-12-06T06:18:17.300Z\tinfo\tservice@v0.161.0/service.go:256\t")
		h.ready.Store(true)
		line := ReadyLine + "\t{}\n"
		if split {
			appendFile(t, log, line[:20])
			time.Sleep(50 * time.Millisecond)
			line = line[20:]
		}
		appendFile(t, log, line)
		if err := <-done; err != nil {
			t.Fatalf("split %v: %v", split, err)
		}
		cancel()
		if n := h.asked.Load(); n != 2 {
			t.Errorf("split %v: the endpoint was asked %d times, want 2 (at the start, at the line)", split, n)
		}
	}
}

// A ready line before the run's first byte is the run before's: it asks
// nothing.
func TestWaitHealthyIgnoresAnEarlierRunsLine(t *testing.T) {
	noRecheck(t)
	h := newHealthServer(t)
	log := filepath.Join(t.TempDir(), "collector.log")
	appendFile(t, log, ReadyLine+"\n")
	fi, _ := os.Stat(log)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := waitHealthy(ctx, make(chan struct{}), h.port, time.Hour, log, fi.Size())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the deadline", err)
	}
	if n := h.asked.Load(); n != 1 {
		t.Errorf("asked %d times, want 1 (at the start)", n)
	}
}

// A line the collector did not write (the endpoint still 503) turns the
// wait into the poll; so does a log that cannot be watched.
func TestWaitHealthyFallsBackToThePoll(t *testing.T) {
	noRecheck(t)
	for _, name := range []string{"forged line", "no log"} {
		h := newHealthServer(t)
		log := filepath.Join(t.TempDir(), "collector.log")
		if name == "forged line" {
			appendFile(t, log, "")
		}
		go func() {
			time.Sleep(100 * time.Millisecond)
			if name == "forged line" {
				appendFile(t, log, ReadyLine+"\n")
				time.Sleep(200 * time.Millisecond)
			}
			h.ready.Store(true)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := waitHealthy(ctx, make(chan struct{}), h.port, 10*time.Millisecond, log, 0)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n := h.asked.Load(); n < 3 {
			t.Errorf("%s: asked %d times, want the poll's", name, n)
		}
	}
}

// A recheck finds a collector that never logs the line.
func TestWaitHealthyRecheck(t *testing.T) {
	old := readyRecheck
	readyRecheck = 20 * time.Millisecond
	defer func() { readyRecheck = old }()
	h := newHealthServer(t)
	log := filepath.Join(t.TempDir(), "collector.log")
	appendFile(t, log, "")
	go func() { time.Sleep(100 * time.Millisecond); h.ready.Store(true) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := waitHealthy(ctx, make(chan struct{}), h.port, time.Hour, log, 0); err != nil {
		t.Fatal(err)
	}
}

// The collector's exit ends the wait.
func TestWaitHealthyExited(t *testing.T) {
	noRecheck(t)
	h := newHealthServer(t)
	log := filepath.Join(t.TempDir(), "collector.log")
	appendFile(t, log, "")
	exited := make(chan struct{})
	go func() { time.Sleep(50 * time.Millisecond); appendFile(t, log, "Error: bind\n"); close(exited) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := waitHealthy(ctx, exited, h.port, time.Hour, log, 0); !errors.Is(err, errExited) {
		t.Fatalf("err %v, want errExited", err)
	}
}

// The real collector logs ReadyLine as written here, once its health
// check answers 200: with no poll and no recheck, only the line can end
// the wait.
func TestWaitHealthyRealCollector(t *testing.T) {
	noRecheck(t)
	bin := testenv.Collector(t)
	dir := t.TempDir()
	port := harness.FreePort(t)
	cfg := fmt.Sprintf(`extensions:
  health_check:
    endpoint: 127.0.0.1:%d
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
exporters:
  file:
    path: %s
service:
  extensions: [health_check]
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
`, port, harness.FreePort(t), filepath.Join(dir, "traces.jsonl"))
	cfgPath := filepath.Join(dir, "collector.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "collector.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // even past a test's timeout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() { cmd.Process.Kill(); <-exited }()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := waitHealthy(ctx, exited, port, time.Hour, logPath, 0); err != nil {
		data, _ := os.ReadFile(logPath)
		t.Fatalf("%v; its log:\n%s", err, data)
	}
}
