package supervise_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/helper/supervise"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// The attacks on the job's OTLP receivers by another local user (nobody):
// connections that trickle HTTP header lines (800 KiB in 5 s, then a byte
// a second; the server keeps up to 1 MiB of them), requests that trickle
// their body (which the server reads before its 401), gRPC connections that
// speak HTTP/2 and start no call, TCP connections to the gRPC port that
// send nothing, and gRPC connections that start 40 calls each and never
// finish their messages. Without the token none gets anything in; the
// test measures how long the collector holds each (the rendered bounds:
// headers within render.ReceiverReadHeaderTimeout, a request within
// render.ReceiverReadTimeout, an idle gRPC
// connection render.ReceiverMaxConnIdle, one with calls in flight
// render.ReceiverMaxConnAge (±10 %) + render.ReceiverMaxConnAgeGrace, and
// render.ReceiverMaxConcurrentStreams calls on one connection; gRPC's own
// 120 s handshake bound for one that never speaks HTTP/2) and what they
// cost it in memory, while the job's SDK-side exports with the token go on
// being accepted on both receivers.
func TestReceiversHostileConnections(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the attacker runs as another user")
	}
	// In parallel with the package's other tests: it waits on the
	// collector's bounds (up to 3 min) far more than it works, and its
	// bounds carry a loaded host's slack.
	t.Parallel()
	const trickle, body, idle, silent, streams = 100, 20, 100, 20, 10
	s := harness.StartSup(t, harness.Job{JobID: "913"}).MustReady(t)
	pid := s.Report.CollectorPID
	time.Sleep(3 * time.Second) // past the collector's start (its GC is off for 2 s)
	before, err := testenv.ReadMem(pid)
	if err != nil {
		t.Fatal(err)
	}
	var peak atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if m, err := testenv.ReadMem(pid); err == nil && int64(m.RSS) > peak.Load() {
				peak.Store(int64(m.RSS))
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()

	dir := harness.SharedDir(t)
	cmd := exec.Command(supervise.CopyTestBinary(t, dir), "-test.run=^TestReceiversAttackerChild$", "-test.timeout=0")
	cmd.Env = []string{
		fmt.Sprintf("GOS_RECV_HTTP=%d", s.Report.Ports.OTLPHTTP), fmt.Sprintf("GOS_RECV_GRPC=%d", s.Report.Ports.OTLPGRPC),
		fmt.Sprintf("GOS_RECV_N=%d,%d,%d,%d,%d", trickle, body, idle, silent, streams),
	}
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}, Setpgid: true}
	cmd.Stderr = os.Stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	lines := make(chan string, 8)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func(within time.Duration) string {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the attacker ended early")
			}
			return l
		case <-time.After(within):
			t.Fatalf("the attacker said nothing for %v", within)
		}
		return ""
	}
	if l := next(30 * time.Second); l != "OPEN" {
		t.Fatalf("attacker: %s", l)
	}
	opened := time.Now()

	// The job's side: an export with the token on each receiver every
	// second while the attack lasts.
	var exports, worst atomic.Int64
	exporting := make(chan struct{})
	exported := make(chan struct{})
	go func() {
		defer close(exported)
		for {
			select {
			case <-exporting:
				return
			case <-time.After(time.Second):
			}
			start := time.Now()
			if code, err := tokenExport(s.Report.Ports.OTLPHTTP, s.ReceiverToken, false); err != nil || code != "200" {
				t.Errorf("the job's OTLP/HTTP export during the attack: HTTP %s %v", code, err)
			}
			if st, err := tokenExport(s.Report.Ports.OTLPGRPC, s.ReceiverToken, true); err != nil || st != "0" {
				t.Errorf("the job's OTLP/gRPC export during the attack: grpc-status %q %v", st, err)
			}
			exports.Add(1)
			if d := int64(time.Since(start)); d > worst.Load() {
				worst.Store(d)
			}
		}
	}()

	// The attacker reports each kind as its last connection closes:
	// "<kind> closed=<n> min=<ms> max=<ms> bytes=<per connection>
	// refused=<gRPC calls refused per connection>".
	results := map[string][5]int{}
	for range 5 {
		l := next(4 * time.Minute)
		var kind string
		var r [5]int
		if _, err := fmt.Sscanf(l, "%s closed=%d min=%d max=%d bytes=%d refused=%d", &kind, &r[0], &r[1], &r[2], &r[3], &r[4]); err != nil {
			t.Fatalf("attacker: %q", l)
		}
		results[kind] = r
		t.Logf("%s: %d of the attacker's connections ended by the collector (closed; a trickled body: answered), %d to %d ms after they opened (%d bytes sent, %d gRPC calls refused per connection), %v into the attack",
			kind, r[0], r[1], r[2], r[3], r[4], time.Since(opened).Round(time.Second))
		if kind == "trickle" {
			m, _ := testenv.ReadMem(pid)
			t.Logf("collector VmRSS: %.0f MiB before the attack, %.0f MiB at its highest, %.0f MiB once the trickling connections were closed",
				before.RSS/1024, float64(peak.Load())/1024, m.RSS/1024)
		}
	}
	close(exporting)
	<-exported
	close(stopSampling)
	<-sampled
	after, _ := testenv.ReadMem(pid)

	slack := 10 * time.Second // a loaded test host
	bounds := map[string]struct {
		n     int
		bound time.Duration
	}{
		"trickle": {trickle, render.ReceiverReadHeaderTimeout},
		"body":    {body, render.ReceiverReadTimeout},
		"idle":    {idle, render.ReceiverMaxConnIdle},
		"silent":  {silent, 120 * time.Second}, // gRPC's handshake bound (grpc.ConnectionTimeout's default)
		// gRPC varies each connection's age by up to ±10 %.
		"streams": {streams, render.ReceiverMaxConnAge*11/10 + render.ReceiverMaxConnAgeGrace},
	}
	for kind, b := range bounds {
		r, ok := results[kind]
		if !ok {
			t.Errorf("no report of the %s connections", kind)
			continue
		}
		if r[0] != b.n {
			t.Errorf("%s: %d of %d connections closed by the collector", kind, r[0], b.n)
		}
		if max := time.Duration(r[2]) * time.Millisecond; max > b.bound+slack {
			t.Errorf("%s: a connection held %v, want at most %v (+%v)", kind, max, b.bound, slack)
		}
	}
	if r := results["streams"]; r[4] != streamsPerConn-render.ReceiverMaxConcurrentStreams {
		t.Errorf("streams: %d of %d calls on one connection refused, want all past %d", r[4], streamsPerConn, render.ReceiverMaxConcurrentStreams)
	}
	if n := exports.Load(); n == 0 {
		t.Error("no export of the job's during the attack")
	}
	t.Logf("the job's exports (HTTP and gRPC, with the token) during the attack: %d pairs, all accepted, the slowest pair %v; collector VmRSS %.0f MiB before, %.0f MiB at the highest, %.0f MiB at the end (%.0f KiB per trickling connection at the highest)",
		exports.Load(), time.Duration(worst.Load()).Round(time.Millisecond), before.RSS/1024, float64(peak.Load())/1024, after.RSS/1024,
		(float64(peak.Load())-before.RSS)/trickle)
	if !harness.HTTPOK(s.HealthURL()) {
		t.Error("the collector's health check fails after the attack")
	}
	if _, err := s.Drain(t, 60*time.Second); err != nil {
		t.Fatalf("drain: %v\n%s", err, s.Output())
	}
}

// giveUp is how long the attacker holds a connection the server does not
// close.
const giveUp = 180 * time.Second

// TestReceiversAttackerChild is the attacker of
// TestReceiversHostileConnections (skipped otherwise): it opens the
// connections, says OPEN, and reports each kind once its connections
// are closed (by the server, or by itself after giveUp).
func TestReceiversAttackerChild(t *testing.T) {
	httpPort, _ := strconv.Atoi(os.Getenv("GOS_RECV_HTTP"))
	grpcPort, _ := strconv.Atoi(os.Getenv("GOS_RECV_GRPC"))
	if httpPort == 0 {
		t.Skip("the child of TestReceiversHostileConnections")
	}
	var n [5]int
	fmt.Sscanf(os.Getenv("GOS_RECV_N"), "%d,%d,%d,%d,%d", &n[0], &n[1], &n[2], &n[3], &n[4])
	type kind struct {
		name string
		port int
		n    int
		// talk speaks on c until the server closes it, or for giveUp, and
		// returns the bytes sent, whether the server closed it and how
		// many gRPC calls it refused.
		talk func(c net.Conn) (int, bool, int)
	}
	kinds := []kind{
		{"trickle", httpPort, n[0], trickleHeaders},
		{"body", httpPort, n[1], trickleBody},
		{"idle", grpcPort, n[2], func(c net.Conn) (int, bool, int) { return speakHTTP2(c, 0) }},
		{"silent", grpcPort, n[3], func(c net.Conn) (int, bool, int) {
			_ = c.SetDeadline(time.Now().Add(giveUp))
			_, err := io.Copy(io.Discard, c)
			return 0, !os.IsTimeout(err), 0
		}},
		{"streams", grpcPort, n[4], func(c net.Conn) (int, bool, int) { return speakHTTP2(c, streamsPerConn) }},
	}
	conns := make([][]net.Conn, len(kinds))
	for i, k := range kinds {
		for range k.n {
			c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", k.port), 10*time.Second)
			if err != nil {
				fmt.Printf("DIAL %s: %v\n", k.name, err)
				return
			}
			conns[i] = append(conns[i], c)
		}
	}
	fmt.Println("OPEN")
	var out sync.Mutex
	var all sync.WaitGroup
	for i, k := range kinds {
		all.Add(1)
		go func() {
			defer all.Done()
			var wg sync.WaitGroup
			var mu sync.Mutex
			var held []time.Duration
			var sent, closed, refused int
			for _, c := range conns[i] {
				wg.Add(1)
				go func() {
					defer wg.Done()
					start := time.Now()
					b, byServer, r := k.talk(c)
					d := time.Since(start)
					c.Close()
					mu.Lock()
					if byServer {
						closed++
					}
					held = append(held, d)
					sent, refused = max(sent, b), max(refused, r)
					mu.Unlock()
				}()
			}
			wg.Wait()
			out.Lock()
			defer out.Unlock()
			fmt.Printf("%s closed=%d min=%d max=%d bytes=%d refused=%d\n", k.name, closed, slices.Min(held).Milliseconds(), slices.Max(held).Milliseconds(), sent, refused)
		}()
	}
	all.Wait()
}

// trickleHeaders starts an OTLP/HTTP request without a token, sends
// 100 header lines of 8 KiB, one every 50 ms (800 KiB in 5 s, under the
// server's 1 MiB), then one byte a second of one more line, until the
// server closes the connection (or for giveUp); it returns the bytes
// sent and whether the server closed it.
func trickleHeaders(c net.Conn) (int, bool, int) {
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, c); close(done) }()
	end := time.After(giveUp)
	sent, _ := io.WriteString(c, "POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-protobuf\r\n")
	pad := strings.Repeat("a", 8<<10)
	for i := 0; ; i++ {
		wait := 50 * time.Millisecond
		line := fmt.Sprintf("X-Pad-%d: %s\r\n", i, pad)
		switch {
		case i == 100:
			line = "X-Slow: "
		case i > 100:
			wait, line = time.Second, "a"
		}
		select {
		case <-done:
			return sent, true, 0
		case <-end:
			return sent, false, 0
		case <-time.After(wait):
		}
		k, err := io.WriteString(c, line)
		sent += k
		if err != nil {
			<-done
			return sent, true, 0
		}
	}
}

// trickleBody sends a whole OTLP/HTTP request head without a token that
// announces a 200 KB body, then one byte of it a second: net/http reads
// (and drops) up to 256 KiB of a body its handler left unread before it
// answers, here the 401. It returns once the answer or the connection's
// end comes (or after giveUp), with the bytes sent and whether the server
// ended the wait.
func trickleBody(c net.Conn) (int, bool, int) {
	answered := make(chan struct{})
	go func() { _, _ = c.Read(make([]byte, 1)); close(answered) }()
	sent, _ := io.WriteString(c, "POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n")
	end := time.After(giveUp)
	for {
		select {
		case <-answered:
			return sent, true, 0
		case <-end:
			return sent, false, 0
		case <-time.After(time.Second):
		}
		k, err := io.WriteString(c, "a")
		sent += k
		if err != nil {
			<-answered
			return sent, true, 0
		}
	}
}

// streamsPerConn is how many calls the "streams" attacker starts on one
// connection.
const streamsPerConn = 40

// speakHTTP2 speaks HTTP/2 as a gRPC client does: the preface and its
// SETTINGS, then it acknowledges the server's SETTINGS and PINGs. With
// calls 0 it starts none (an idle connection); else it starts that many
// Export calls without a token, each sending the first KiB of a 1 MiB
// message and no more (the server checks the token once the message is
// whole), ignoring the server's limit on calls in flight. It reads until
// the server closes the connection (or for giveUp) and returns the bytes
// sent, whether the server closed it, and how many calls it refused
// (RST_STREAM REFUSED_STREAM).
func speakHTTP2(c net.Conn, calls int) (int, bool, int) {
	frame := func(typ, flags byte, stream uint32, payload []byte) []byte {
		h := make([]byte, 9, 9+len(payload))
		h[0], h[1], h[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
		h[3], h[4] = typ, flags
		binary.BigEndian.PutUint32(h[5:], stream)
		return append(h, payload...)
	}
	const data, headers, rstStream, settings, ping = 0, 1, 3, 4, 6
	const ack, endHeaders, refusedStream = 1, 4, 7
	_ = c.SetDeadline(time.Now().Add(giveUp))
	out := append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), frame(settings, 0, 0, nil)...)
	// HPACK: :method POST and :scheme http from the static table, the
	// rest as literals without indexing.
	block := []byte{0x83, 0x86}
	for _, f := range [][2]string{{":path", "/opentelemetry.proto.collector.trace.v1.TraceService/Export"},
		{":authority", "127.0.0.1"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		block = append(append(append(append(block, 0, byte(len(f[0]))), f[0]...), byte(len(f[1]))), f[1]...)
	}
	msg := append([]byte{0, 0, 0x10, 0, 0}, make([]byte, 1<<10)...) // 1 MiB announced, 1 KiB sent
	for i := range calls {
		id := uint32(2*i + 1)
		out = append(append(out, frame(headers, endHeaders, id, block)...), frame(data, 0, id, msg)...)
	}
	if _, err := c.Write(out); err != nil {
		return 0, !os.IsTimeout(err), 0
	}
	sent, refused := len(out), 0
	r := bufio.NewReader(c)
	h := make([]byte, 9)
	for {
		if _, err := io.ReadFull(r, h); err != nil {
			return sent, !os.IsTimeout(err), refused
		}
		n := int(binary.BigEndian.Uint32(append([]byte{0}, h[:3]...)))
		payload := make([]byte, n)
		if _, err := io.ReadFull(r, payload); err != nil {
			return sent, !os.IsTimeout(err), refused
		}
		var reply []byte
		switch {
		case h[3] == settings && h[4]&ack == 0:
			reply = frame(settings, ack, 0, nil)
		case h[3] == ping && h[4]&ack == 0:
			reply = frame(ping, ack, 0, payload)
		case h[3] == rstStream && n == 4 && binary.BigEndian.Uint32(payload) == refusedStream:
			refused++
		}
		if reply != nil {
			if _, err := c.Write(reply); err != nil {
				return sent, !os.IsTimeout(err), refused
			}
			sent += len(reply)
		}
	}
}

// tokenExport sends an empty trace export with the receiver token as an
// SDK does, over OTLP/HTTP (JSON) or OTLP/gRPC (HTTP/2 without TLS), each
// on a client of its own that keeps its connection, within 10 s; it
// returns the HTTP status or the grpc-status.
func tokenExport(port int, token string, grpc bool) (string, error) {
	c := httpSDK
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/traces", port)
	body, ctype := []byte(`{"resourceSpans":[]}`), "application/json"
	if grpc {
		c = grpcSDK
		url = fmt.Sprintf("http://127.0.0.1:%d/opentelemetry.proto.collector.trace.v1.TraceService/Export", port)
		body, ctype = []byte{0, 0, 0, 0, 0}, "application/grpc"
	}
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("Authorization", "Bearer "+token)
	if grpc {
		req.Header.Set("TE", "trailers")
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if !grpc {
		return strconv.Itoa(resp.StatusCode), nil
	}
	if st := resp.Header.Get("Grpc-Status"); st != "" {
		return st, nil
	}
	return resp.Trailer.Get("Grpc-Status"), nil
}

// httpSDK and grpcSDK are the job's two exporters of tokenExport.
var httpSDK, grpcSDK = &http.Client{Timeout: 10 * time.Second}, func() *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}()
