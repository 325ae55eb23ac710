package supervise

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// upLine is one metrics.jsonl line as the file exporter writes it: an up
// point of job at ns, beside another metric.
func upLine(job, instance string, ns int64) string {
	return fmt.Sprintf(`{"resourceMetrics":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"svc"}},`+
		`{"key":"service.instance.id","value":{"stringValue":%q}},{"key":"service.name.override","value":{"stringValue":%q}}]},`+
		`"scopeMetrics":[{"scope":{},"metrics":[{"name":"vllm_x","sum":{"dataPoints":[{"timeUnixNano":"1","asDouble":3}]}},`+
		`{"name":"up","gauge":{"dataPoints":[{"timeUnixNano":"%d","asDouble":1}]}}]}]}]}`+"\n", instance, job, ns)
}

// TestSampleFollower: the hint's time is the oldest of the targets' latest
// up points, zero until every target has one; lines are read as they grow,
// a partial line only once complete.
func TestSampleFollower(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "metrics.jsonl")
	targets := []render.Target{{Job: "gym-vllm/policy", Instance: "n1:8000", Port: 8000}, {Job: "node", Instance: "n1:9100", Port: 9100}}
	f := newSampleFollower(path, targets)
	appendTo := func(s string) {
		fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		fh.WriteString(s)
		fh.Close()
	}
	poll := func() time.Time {
		if err := f.poll(); err != nil {
			t.Fatal(err)
		}
		return f.sampledAt()
	}
	if at := poll(); !at.IsZero() {
		t.Fatalf("no file: %v", at)
	}
	appendTo(upLine("gym-vllm/policy", "n1:8000", 5e9))
	if at := poll(); !at.IsZero() {
		t.Fatalf("one target of two: %v", at)
	}
	// A Gym producer named like a scrape job but without its instance
	// does not count.
	appendTo(upLine("node", "", 9e9))
	if at := poll(); !at.IsZero() {
		t.Fatalf("a foreign resource counted: %v", at)
	}
	line := upLine("node", "n1:9100", 7e9)
	appendTo(line[:40])
	if at := poll(); !at.IsZero() {
		t.Fatalf("a partial line counted: %v", at)
	}
	appendTo(line[40:])
	if at := poll(); at.UnixNano() != 5e9 {
		t.Fatalf("both targets: got %v, want the older latest (5 s)", at.UnixNano())
	}
	appendTo(upLine("gym-vllm/policy", "n1:8000", 12e9))
	if at := poll(); at.UnixNano() != 7e9 {
		t.Fatalf("after a newer vLLM sample: got %v, want 7 s", at.UnixNano())
	}
}

// TestControlServer: the supervisor's control socket, asked by the batch step's
// C code (spank/controlsock.c) on a socket of root's in a root-only dir (as
// the prolog makes it): it answers the number of targets and the time of
// the follower, targets=0 when the node has none; another user (nobody)
// cannot reach it; it takes the final-scrape request from root only, one
// pending at most; while ControlConns connections sit idle, one more is
// still answered within the step's bound (the oldest idle one is closed
// to make room), and the idle ones are closed within ControlConnTimeout.
func TestControlServer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the steps trust root's control socket only: run as root")
	}
	bin := testenv.HoldDriver(t)
	dir := t.TempDir()
	metrics := filepath.Join(dir, "metrics.jsonl")
	os.WriteFile(metrics, []byte(upLine("node", "n1:9100", 1700000000123456789)), 0o600)
	srv, path := startControl(t)
	ask := func(since string, as ...string) string {
		t.Helper()
		argv := append(as, bin, path, since)
		out, err := exec.Command(argv[0], argv[1:]...).Output()
		if err != nil {
			t.Fatalf("%v: %v", argv, err)
		}
		return strings.TrimSpace(string(out))
	}
	if got := ask("1"); got != "0" {
		t.Fatalf("before the follower knows: %s", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		followSamples(ctx, srv, metrics, []render.Target{{Job: "node", Instance: "n1:9100"}}, 10*time.Millisecond)
		close(done)
	}()
	deadline := time.Now().Add(time.Minute)
	for ask("1700000000123") != "1" {
		if time.Now().After(deadline) {
			t.Fatal("the sample at 1700000000123 ms never ended the hold")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := ask("1700000000124"); got != "0" {
		t.Errorf("a hold from after the sample ended: %s", got)
	}
	cancel()
	<-done
	followSamples(context.Background(), srv, metrics, nil, time.Millisecond)
	if got := ask("9999999999999"); got != "2" {
		t.Errorf("no targets: %s, want 2", got)
	}
	// Another user (nobody) cannot reach the socket (the dir is root's,
	// 0700): no answer.
	if got := ask("9999999999999", "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"); got != "0" {
		t.Errorf("another user got an answer: %s", got)
	}
	// The final-scrape request: root's is taken (one pending at most),
	// anyone else's is not answered and queues nothing.
	if got := ask("final", "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"); got != "0" || len(srv.finals) != 0 {
		t.Errorf("another user's final request: %s, %d pending", got, len(srv.finals))
	}
	for i := 0; i < 2; i++ {
		if got := ask("final"); got != "1" || len(srv.finals) != 1 {
			t.Errorf("root's final request %d: %s, %d pending; want 1, 1", i+1, got, len(srv.finals))
		}
	}
	// The connection cap: ControlConns idle connections (root's, stuck), then
	// one more asks: answered within the step's own bound all the same.
	var idle []net.Conn
	for i := 0; i < ControlConns; i++ {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	for deadline := time.Now().Add(10 * time.Second); len(srv.slots) < ControlConns; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server took %d of %d idle connections", len(srv.slots), ControlConns)
		}
	}
	if got := ask("9999999999999"); got != "2" {
		t.Errorf("past the connection cap, with every slot idle: %s, want 2", got)
	}
	// The idle ones are closed by the server within ControlConnTimeout.
	for _, c := range idle {
		c.SetReadDeadline(time.Now().Add(ControlConnTimeout + 5*time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || os.IsTimeout(err) {
			t.Errorf("an idle connection was not closed by the server: %v", err)
		}
		c.Close()
	}
	if got := ask("9999999999999"); got != "2" {
		t.Errorf("after the idle connections: %s, want 2", got)
	}
}
