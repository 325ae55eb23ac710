package supervise

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
	f, err := newFinalSink("tok", 0)
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
	f, err := newFinalSink("tok", 0)
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

// The attack of a user who knows the guard: while the collector's final
// export arrives, another local user (nobody) holds 2×FinalMaxConns
// connections from AF_INET6 sockets to ::ffff:127.0.0.1 (listed only in
// /proc/net/tcp6), opening a new one whenever the server closes one, and
// floods the port with connections it closes at once. Each is refused at
// accept: the mapped ones are found (nobody's), the closed ones are not
// found; none takes one of the FinalMaxConns slots, and the export is
// served within a second.
func TestFinalSinkFloodAndMappedClients(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the attacker runs as another user")
	}
	f, err := newFinalSink("tok", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	var logged []string
	var logMu sync.Mutex
	f.guard.setLog(func(format string, args ...any) {
		logMu.Lock()
		logged = append(logged, fmt.Sprintf(format, args...))
		logMu.Unlock()
	})
	dir := openDir(t)
	cmd := exec.Command(CopyTestBinary(t, dir), "-test.run=^TestFinalSinkFloodChild$")
	const mapped, flooders, attack = 2 * FinalMaxConns, 2, 8 * time.Second
	cmd.Env = []string{"GOS_FLOOD_PORT=" + strconv.Itoa(f.port()), "GOS_FLOOD_MAPPED=" + strconv.Itoa(mapped),
		"GOS_FLOOD_WORKERS=" + strconv.Itoa(flooders), "GOS_FLOOD_FOR=" + attack.String()}
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
	if l := next(); l != "STARTED" {
		t.Fatalf("attacker: %s", l)
	}
	// The flood is on: the collector's exports, one every 500 ms.
	var worst time.Duration
	for i := 0; i < 6; i++ {
		time.Sleep(500 * time.Millisecond)
		start := time.Now()
		code, err := postFinal(f.port(), "tok", finalExport(t), 5*time.Second)
		took := time.Since(start)
		worst = max(worst, took)
		if err != nil || code != http.StatusOK || f.since(start) == nil {
			t.Fatalf("export %d during the flood: %d %v after %v (refused so far: %d of another uid, %d unproven)",
				i, code, err, took.Round(time.Millisecond), f.guard.Foreign(), f.guard.Unproven())
		}
		if took > time.Second {
			t.Errorf("export %d during the flood took %v, want < 1 s", i, took.Round(time.Millisecond))
		}
	}
	report := next() // MAPPED=<closed by the server within 1 s> FLOOD=<connections> SLOWEST=<ms>
	var closedFast, flood, slowestMS int
	if _, err := fmt.Sscanf(report, "MAPPED=%d FLOOD=%d SLOWEST=%d", &closedFast, &flood, &slowestMS); err != nil {
		t.Fatalf("attacker: %q", report)
	}
	if closedFast == 0 {
		t.Errorf("no IPv4-mapped connection of another uid was closed at once: %s", report)
	}
	if slowestMS >= 1000 {
		t.Errorf("an IPv4-mapped connection of another uid was held %d ms, want it closed at accept", slowestMS)
	}
	refused := f.guard.Foreign() + f.guard.Unproven()
	if refused < closedFast {
		t.Errorf("%d connections refused at accept, fewer than the %d mapped ones closed at once", refused, closedFast)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if len(logged) == 0 || len(logged) > 2 {
		t.Errorf("log lines %q: want one per kind of refusal (another uid; owner not found)", logged)
	}
	t.Logf("%v of attack: %d mapped connections opened and closed at accept (slowest close %d ms), %d flood connections; refused %d of another uid, %d whose owner was gone; slowest of 6 exports %v; log: %q",
		attack, closedFast, slowestMS, flood, f.guard.Foreign(), f.guard.Unproven(), worst.Round(time.Millisecond), logged)
}

// TestFinalSinkFloodChild is the attacker of
// TestFinalSinkFloodAndMappedClients (skipped otherwise): it keeps
// GOS_FLOOD_MAPPED IPv4-mapped IPv6 connections open (a new one when the
// server closes one), runs GOS_FLOOD_WORKERS loops of connect-and-close,
// says STARTED, and after GOS_FLOOD_FOR reports how many mapped
// connections the server closed, how many flood connections were made,
// and the longest a mapped connection was held, ms.
func TestFinalSinkFloodChild(t *testing.T) {
	port, _ := strconv.Atoi(os.Getenv("GOS_FLOOD_PORT"))
	if port == 0 {
		t.Skip("the child of TestFinalSinkFloodAndMappedClients")
	}
	mapped, _ := strconv.Atoi(os.Getenv("GOS_FLOOD_MAPPED"))
	workers, _ := strconv.Atoi(os.Getenv("GOS_FLOOD_WORKERS"))
	dur, _ := time.ParseDuration(os.Getenv("GOS_FLOOD_FOR"))
	end := time.Now().Add(dur)
	var closed, flood, slowest atomic.Int64
	var wg sync.WaitGroup
	for range mapped {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
				if err != nil {
					return
				}
				to := &unix.SockaddrInet6{Port: port, Addr: netip.MustParseAddr("::ffff:127.0.0.1").As16()}
				if err := unix.Connect(fd, to); err != nil {
					unix.Close(fd)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				opened := time.Now()
				// Held until the server closes it (or the attack ends).
				tv := unix.NsecToTimeval(int64(time.Until(end)))
				_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
				n, _ := unix.Read(fd, make([]byte, 1))
				held := time.Since(opened)
				unix.Close(fd)
				time.Sleep(20 * time.Millisecond) // at most 50 per second each
				if n == 0 && time.Now().Before(end) {
					closed.Add(1)
					for ms := held.Milliseconds(); ms > slowest.Load(); {
						if slowest.CompareAndSwap(slowest.Load(), ms) {
							break
						}
					}
				}
			}
		}()
	}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				c, err := net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
				if err == nil {
					c.Close()
					flood.Add(1)
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	fmt.Println("STARTED")
	wg.Wait()
	fmt.Printf("MAPPED=%d FLOOD=%d SLOWEST=%d\n", closed.Load(), flood.Load(), slowest.Load())
}
