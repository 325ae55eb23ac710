package supervise

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	commonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	metricsv1 "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/proto"
)

// finalExport is a collector's export of its own metrics: one counter.
func finalExport(t *testing.T) []byte {
	t.Helper()
	md := &metricsv1.MetricsData{ResourceMetrics: []*metricsv1.ResourceMetrics{{ScopeMetrics: []*metricsv1.ScopeMetrics{{
		Metrics: []*metricsv1.Metric{{Name: "otelcol_receiver_accepted_spans", Data: &metricsv1.Metric_Sum{Sum: &metricsv1.Sum{
			IsMonotonic: true, AggregationTemporality: metricsv1.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE,
			DataPoints: []*metricsv1.NumberDataPoint{{
				Attributes: []*commonv1.KeyValue{{Key: "receiver", Value: &commonv1.AnyValue{Value: &commonv1.AnyValue_StringValue{StringValue: "otlp"}}}},
				Value:      &metricsv1.NumberDataPoint_AsInt{AsInt: 42},
			}},
		}}}},
	}}}}}
	b, err := proto.Marshal(md)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// postFinal sends the export as the collector does and returns the status.
func postFinal(port int, token string, body []byte, within time.Duration) (int, error) {
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/v1/metrics", port), bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := (&http.Client{Timeout: within}).Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// idleConns opens n connections to port and sends nothing.
func idleConns(t *testing.T, port, n int) []net.Conn {
	t.Helper()
	var cs []net.Conn
	for range n {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	return cs
}

// closedByServer waits (bounded) until the server closes each conn and
// returns how many it closed.
func closedByServer(cs []net.Conn, within time.Duration) int {
	deadline := time.Now().Add(within)
	closed := 0
	for _, c := range cs {
		_ = c.SetReadDeadline(deadline)
		if _, err := c.Read(make([]byte, 1)); err != nil && !os.IsTimeout(err) {
			closed++
		}
		c.Close()
	}
	return closed
}

// Many idle connections of the supervisor's own user: past the cap they
// wait in the backlog; the idle ones are closed at the header timeout, and
// the collector's export is then served.
func TestFinalSinkIdleConnections(t *testing.T) {
	f, err := newFinalSink("tok")
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	idle := idleConns(t, f.port(), 3*FinalMaxConns)
	start := time.Now()
	code, err := postFinal(f.port(), "tok", finalExport(t), 2*time.Minute)
	if err != nil || code != http.StatusOK {
		t.Fatalf("the export behind %d idle connections: %d %v", len(idle), code, err)
	}
	if f.since(start) == nil {
		t.Error("the export was answered but not kept")
	}
	if n := closedByServer(idle, time.Minute); n != len(idle) {
		t.Errorf("%d of %d idle connections closed by the server", n, len(idle))
	}
}

// The attack: another local user holds hundreds of idle connections to the
// final-figures port. Each is closed at once (its peer is not the
// supervisor's uid), and the collector's export is served meanwhile.
func TestFinalSinkAnotherUsersConnections(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the attacker runs as another user")
	}
	f, err := newFinalSink("tok")
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	const n = 300
	dir := openDir(t)
	cp := CopyTestBinary(t, dir)
	cmd := exec.Command(cp, "-test.run=^TestFinalSinkAttackerChild$")
	cmd.Env = []string{"GOS_FINAL_PORT=" + strconv.Itoa(f.port()), "GOS_FINAL_CONNS=" + strconv.Itoa(n)}
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := bufio.NewScanner(out)
	next := func() string {
		if !lines.Scan() {
			t.Fatalf("the attacker said nothing more: %v", lines.Err())
		}
		return lines.Text()
	}
	if l := next(); l != fmt.Sprintf("CONNECTED=%d", n) {
		t.Fatalf("attacker: %s", l)
	}
	start := time.Now()
	code, err := postFinal(f.port(), "tok", finalExport(t), 2*time.Minute)
	if err != nil || code != http.StatusOK || f.since(start) == nil {
		t.Fatalf("the export while another user holds %d connections: %d %v", n, code, err)
	}
	l := next()
	if l != fmt.Sprintf("CLOSED=%d", n) {
		t.Errorf("attacker: %s, want all %d connections closed by the server", l, n)
	}
	t.Logf("export served in %v while another user held %d connections; %s", time.Since(start).Round(time.Millisecond), n, l)
}

// TestFinalSinkAttackerChild is the attacker of
// TestFinalSinkAnotherUsersConnections (skipped otherwise): it opens
// GOS_FINAL_CONNS idle connections, says so, then reports how many the
// server closed within a minute.
func TestFinalSinkAttackerChild(t *testing.T) {
	port, _ := strconv.Atoi(os.Getenv("GOS_FINAL_PORT"))
	n, _ := strconv.Atoi(os.Getenv("GOS_FINAL_CONNS"))
	if port == 0 {
		t.Skip("the child of TestFinalSinkAnotherUsersConnections")
	}
	var cs []net.Conn
	for range n {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 30*time.Second)
		if err != nil {
			fmt.Printf("DIAL %v\n", err)
			return
		}
		cs = append(cs, c)
	}
	fmt.Printf("CONNECTED=%d\n", len(cs))
	fmt.Printf("CLOSED=%d\n", closedByServer(cs, time.Minute))
}
