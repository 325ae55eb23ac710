package delivery_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/delivery"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// spanID is a unique 8-byte span id in hex for span i of line l.
func spanID(l, i int) string { return fmt.Sprintf("%08x%08x", l+1, i+1) }

// traceLine is one OTLP-JSON export request with n spans, line l's.
func traceLine(l, n int) string {
	var spans []string
	for i := range n {
		spans = append(spans, fmt.Sprintf(`{"traceId":"%032x","spanId":%q,"name":"work.%d","kind":1,"startTimeUnixNano":"1700000000000000000","endTimeUnixNano":"1700000000010000000"}`, l+1, spanID(l, i), i%3))
	}
	return `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"delivery-test"}}]},"scopeSpans":[{"scope":{"name":"t"},"spans":[` + strings.Join(spans, ",") + `]}]}]}` + "\n"
}

// metricLine has one gauge with n data points; logLine n log records.
func metricLine(l, n int) string {
	var pts []string
	for i := range n {
		pts = append(pts, fmt.Sprintf(`{"attributes":[{"key":"i","value":{"intValue":"%d"}}],"timeUnixNano":"%d","asDouble":%d.5}`, i, 1700000000000000000+l, l))
	}
	return `{"resourceMetrics":[{"resource":{},"scopeMetrics":[{"metrics":[{"name":"g","gauge":{"dataPoints":[` + strings.Join(pts, ",") + `]}}]}]}]}` + "\n"
}

func logLine(l, n int) string {
	var recs []string
	for i := range n {
		recs = append(recs, fmt.Sprintf(`{"timeUnixNano":"%d","body":{"stringValue":"line %d record %d"}}`, 1700000000000000000+l, l, i))
	}
	return `{"resourceLogs":[{"resource":{},"scopeLogs":[{"logRecords":[` + strings.Join(recs, ",") + `]}]}]}` + "\n"
}

// appendLines appends lines [from, to) of n items each to dir's three
// files.
func appendLines(t *testing.T, dir string, from, to, n int) {
	t.Helper()
	for sig, mk := range map[string]func(int, int) string{"traces": traceLine, "metrics": metricLine, "logs": logLine} {
		f, err := os.OpenFile(filepath.Join(dir, sig+".jsonl"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		for l := from; l < to; l++ {
			if _, err := f.WriteString(mk(l, n)); err != nil {
				t.Fatal(err)
			}
		}
		f.Close()
	}
}

// backendHolds checks the backend holds exactly want items per signal,
// every span id at least once; it returns the spans held twice.
func backendHolds(t *testing.T, be *harness.Backend, want int, dupBound int64) {
	t.Helper()
	be.Stop(t)
	tr, m, lg := otlptest.MustRead(t, be.Dir, "traces"), otlptest.MustRead(t, be.Dir, "metrics"), otlptest.MustRead(t, be.Dir, "logs")
	ids := map[string]int{}
	for _, s := range tr.Spans {
		ids[s.SpanID]++
	}
	dups := int64(len(tr.Spans) - len(ids))
	if len(ids) != want || m.Points() < want || len(lg.Logs) < want {
		t.Errorf("the backend holds %d distinct spans (%d in all), %d points, %d log records; want %d of each", len(ids), len(tr.Spans), m.Points(), len(lg.Logs), want)
	}
	if dups > dupBound || int64(m.Points()-want) > dupBound || int64(len(lg.Logs)-want) > dupBound {
		t.Errorf("the backend holds %d spans, %d points, %d log records twice: more than the bound %d", dups, m.Points()-want, len(lg.Logs)-want, dupBound)
	}
}

func mustCheckpoint(t *testing.T, dir string) *delivery.Checkpoint {
	t.Helper()
	cp, err := delivery.ReadCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// caughtUp reports whether the checkpoint's offsets reach the ends of
// dir's three files.
func caughtUp(dir string) bool {
	cp, err := delivery.ReadCheckpoint(dir)
	if err != nil {
		return false
	}
	for _, sig := range delivery.Signals {
		fi, err := os.Stat(filepath.Join(dir, sig+".jsonl"))
		p := cp.Files[sig+".jsonl"]
		if err != nil || p == nil || p.Offset != fi.Size() {
			return false
		}
	}
	return true
}

// TestCatchUpAfterOutage: a follower starts while the backend (a real
// OTLP/HTTP collector with bearer-token auth) is down, lines keep
// arriving; the backend comes up on the same port 3 s later and the
// follower catches up from the files by itself, then keeps up with new
// lines (the live latency is measured: append to acknowledgement). The
// backend then holds every item of the files; the refused connections
// made no duplicates (bound 0).
func TestCatchUpAfterOutage(t *testing.T) {
	t.Parallel()
	token := "dl-" + harness.RandHex(8)
	port := harness.FreePort(t)
	dir := t.TempDir()
	appendLines(t, dir, 0, 50, 20)
	headers, err := delivery.TokenHeaders("MY_TOKEN", func(string) (string, bool) { return token, true })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	var stats *delivery.Stats
	go func() {
		var err error
		stats, err = delivery.Run(ctx, delivery.Options{Dir: dir, Endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), Headers: headers,
			Compression: "gzip", Timeout: 2 * time.Second, Retry: delivery.Retry{Initial: 100 * time.Millisecond, Max: 500 * time.Millisecond},
			Follow: true, Poll: 50 * time.Millisecond, RateCap: -1})
		done <- err
	}()
	time.Sleep(time.Second)
	appendLines(t, dir, 50, 100, 20)
	time.Sleep(2 * time.Second)
	if p := mustCheckpoint(t, dir).Files["traces.jsonl"]; p != nil && p.Offset > 0 {
		t.Fatalf("acknowledged %d bytes while the backend was down", p.Offset)
	}
	up := time.Now()
	be := harness.StartBackendOn(t, token, port)
	harness.WaitFor(t, 30*time.Second, "the catch-up", func() bool { return caughtUp(dir) })
	catchUp := time.Since(up)
	// Live: one more line of each signal, acknowledged within the poll
	// and a round trip.
	var lat []time.Duration
	for l := 100; l < 110; l++ {
		at := time.Now()
		appendLines(t, dir, l, l+1, 20)
		harness.WaitFor(t, 10*time.Second, "the live line", func() bool { return caughtUp(dir) })
		lat = append(lat, time.Since(at))
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("the follower ended with %v, want context.Canceled", err)
	}
	tot := stats.Total()
	t.Logf("catch-up of 3 × 100 lines (6,000 items) after the backend came up: %v (its start included); live append-to-ack latencies %v; requests %d, retries %d, duplicates bound %d",
		catchUp.Round(time.Millisecond), lat, tot.Requests, tot.Retries, tot.DuplicatesBound)
	if tot.Lines != 330 || tot.Items != 6600 || tot.Accepted != 6600 || tot.Rejected != 0 || tot.Retries == 0 {
		t.Errorf("stats %+v: want 330 lines, 6600 items accepted, retries during the outage", tot)
	}
	if tot.DuplicatesBound != 0 {
		t.Errorf("duplicates bound %d: refused connections cannot have been stored", tot.DuplicatesBound)
	}
	backendHolds(t, be, 110*20, 0)
}

// TestResumeFromCheckpoint: a delivery, more lines, a second delivery:
// the second sends only the new lines (the backend holds each item once),
// a third sends nothing. Uncompressed, as a job that renders none.
func TestResumeFromCheckpoint(t *testing.T) {
	t.Parallel()
	token := "dl-" + harness.RandHex(8)
	be := harness.StartBackend(t, token)
	dir := t.TempDir()
	opt := delivery.Options{Dir: dir, Endpoint: be.URL, Headers: map[string]string{"Authorization": "Bearer " + token}, Compression: "none"}
	appendLines(t, dir, 0, 10, 5)
	// A half line at the end (the file exporter's flush in progress) is
	// left for later.
	f, _ := os.OpenFile(filepath.Join(dir, "traces.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	half := traceLine(10, 5)
	f.WriteString(half[:40])
	st, err := delivery.Run(t.Context(), opt)
	if err != nil {
		t.Fatal(err)
	}
	// One request per file: its lines joined into one export request.
	if tot := st.Total(); tot.Lines != 30 || tot.Accepted != 150 || tot.Requests != 3 {
		t.Errorf("first: %+v", tot)
	}
	f.WriteString(half[40:])
	f.Close()
	appendLines(t, dir, 11, 20, 5)
	// The metrics and logs files lack line 10: write it too.
	for sig, mk := range map[string]func(int, int) string{"metrics": metricLine, "logs": logLine} {
		g, _ := os.OpenFile(filepath.Join(dir, sig+".jsonl"), os.O_WRONLY|os.O_APPEND, 0)
		g.WriteString(mk(10, 5))
		g.Close()
	}
	st, err = delivery.Run(t.Context(), opt)
	if err != nil {
		t.Fatal(err)
	}
	if tot := st.Total(); tot.Lines != 30 || tot.Accepted != 150 || tot.Requests != 3 {
		t.Errorf("second: %+v, want only the 30 new lines, one request per file", tot)
	}
	st, err = delivery.Run(t.Context(), opt)
	if err != nil || st.Total().Requests != 0 {
		t.Errorf("third: %+v %v, want nothing sent", st.Total(), err)
	}
	cp := mustCheckpoint(t, dir)
	if p := cp.Files["traces.jsonl"]; p.Lines != 20 || p.Accepted != 100 || p.AckedAt.IsZero() {
		t.Errorf("checkpoint %+v", p)
	}
	backendHolds(t, be, 20*5, 0)
}

// hangFirst is a real listener that holds the first n connections
// without answering (a backend that hangs) and forwards every later one
// to upstream.
func hangFirst(t *testing.T, n int64, upstream string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int64
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
			if seen.Add(1) <= n {
				go io.Copy(io.Discard, c)
				continue
			}
			go func() {
				u, err := net.Dial("tcp", strings.TrimPrefix(upstream, "http://"))
				if err != nil {
					c.Close()
					return
				}
				go io.Copy(u, c)
				io.Copy(c, u)
				c.Close()
				u.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	return "http://" + l.Addr().String()
}

// TestTimeoutCountsDuplicates: the backend hangs on the first request
// (accepts it, never answers); after the timeout the line is sent again
// and accepted. The request that timed out may have been stored: its
// items are the duplicates bound (here it never reached the backend,
// which holds every item once).
func TestTimeoutCountsDuplicates(t *testing.T) {
	t.Parallel()
	token := "dl-" + harness.RandHex(8)
	be := harness.StartBackend(t, token)
	dir := t.TempDir()
	appendLines(t, dir, 0, 4, 7)
	start := time.Now()
	st, err := delivery.Run(t.Context(), delivery.Options{Dir: dir, Endpoint: hangFirst(t, 1, be.URL), Headers: map[string]string{"Authorization": "Bearer " + token},
		Compression: "gzip", Timeout: 500 * time.Millisecond, Retry: delivery.Retry{Initial: 50 * time.Millisecond}, Signals: []string{"traces"}, MaxBatchItems: 7})
	if err != nil {
		t.Fatal(err)
	}
	tot := st.Total()
	t.Logf("4 lines, the first hung once: %v, %+v", time.Since(start).Round(time.Millisecond), tot)
	if tot.Requests != 5 || tot.Retries != 1 || tot.DuplicatesBound != 7 || tot.Accepted != 28 {
		t.Errorf("stats %+v: want 5 requests, 1 retry, duplicates bound 7 (the hung request's spans), 28 accepted", tot)
	}
	if cp := mustCheckpoint(t, dir).Files["traces.jsonl"]; cp.DuplicatesBound != 7 {
		t.Errorf("checkpoint's duplicates bound %d, want 7", cp.DuplicatesBound)
	}
	be.Stop(t)
	tr := otlptest.MustRead(t, be.Dir, "traces")
	if len(tr.Spans) != 28 {
		t.Errorf("the backend holds %d spans, want 28", len(tr.Spans))
	}
}

// TestPartialSuccessAndRefusals: a backend speaking OTLP/HTTP JSON's
// answers: a partial success rejecting 2 spans (counted rejected, not
// sent again), a 400 (refused for good: rejected, not retried), a 503
// with Retry-After (retried), then 200. Each line is answered once and
// the offset reaches the end.
func TestPartialSuccessAndRefusals(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	answers := []func(w http.ResponseWriter){
		func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"partialSuccess":{"rejectedSpans":"2","errorMessage":"2 spans too old"}}`)
		},
		func(w http.ResponseWriter) { http.Error(w, `{"code":3,"message":"bad"}`, http.StatusBadRequest) },
		func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "busy", http.StatusServiceUnavailable)
		},
		func(w http.ResponseWriter) { io.WriteString(w, `{}`) },
		func(w http.ResponseWriter) { io.WriteString(w, `{}`) },
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		i := len(got)
		got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type")+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		answers[min(i, len(answers)-1)](w)
	}))
	defer srv.Close()
	dir := t.TempDir()
	appendLines(t, dir, 0, 4, 5)
	start := time.Now()
	st, err := delivery.Run(t.Context(), delivery.Options{Dir: dir, Endpoint: srv.URL + "/", Headers: map[string]string{"Authorization": "Bearer x"}, Signals: []string{"traces"},
		Retry: delivery.Retry{Initial: 10 * time.Millisecond, Max: 5 * time.Second}, MaxBatchItems: 5})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	tot := st.Total()
	if tot.Lines != 4 || tot.Items != 20 || tot.Rejected != 2+5 || tot.Accepted != 13 || tot.Requests != 5 || tot.Retries != 1 || tot.DuplicatesBound != 0 {
		t.Errorf("stats %+v: want 4 lines, 7 rejected (2 partial, 5 by the 400), 13 accepted, 5 requests, 1 retry, no duplicates", tot)
	}
	if took < time.Second {
		t.Errorf("took %v: the 503's Retry-After of 1 s was not honoured", took)
	}
	for _, g := range got {
		if g != "POST /v1/traces application/json Bearer x" {
			t.Errorf("request %q: want POST /v1/traces, JSON, the bearer header", g)
		}
	}
}

// TestWrongTokenStops: a real backend refusing the token (401): delivery
// stops with an error naming the status and the token, and acknowledges
// nothing (what is left is for a later delivery or replay).
func TestWrongTokenStops(t *testing.T) {
	t.Parallel()
	be := harness.StartBackend(t, "right-"+harness.RandHex(6))
	dir := t.TempDir()
	appendLines(t, dir, 0, 3, 2)
	st, err := delivery.Run(t.Context(), delivery.Options{Dir: dir, Endpoint: be.URL, Headers: map[string]string{"Authorization": "Bearer wrong"}})
	var ce *delivery.ConfigError
	if !errors.As(err, &ce) || ce.Status != 401 || !strings.Contains(err.Error(), "check the bearer token") {
		t.Fatalf("err %v, want a 401 naming the token", err)
	}
	if tot := st.Total(); tot.Requests != 1 || tot.Lines != 0 {
		t.Errorf("stats %+v: want one request, nothing acknowledged", tot)
	}
	if p := mustCheckpoint(t, dir).Files["traces.jsonl"]; p != nil && p.Offset != 0 {
		t.Errorf("offset %d after a 401", p.Offset)
	}
	if _, err := delivery.TokenHeaders("NO_SUCH_TOKEN_VAR", func(string) (string, bool) { return "", false }); err == nil || !strings.Contains(err.Error(), "NO_SUCH_TOKEN_VAR") {
		t.Errorf("unset token variable: %v", err)
	}
}

// TestRateCap: 16 simulated nodes (16 node dirs, one follower each) catch
// up at once to one real backend with a cap of 400 items/s each: each
// node's 1,200 items take at least 2 s (a burst of one second's items,
// then the cap), so the backend never gets more than 16 × 400 items/s
// after the first second; and everything arrives.
func TestRateCap(t *testing.T) {
	t.Parallel()
	token := "dl-" + harness.RandHex(8)
	be := harness.StartBackend(t, token)
	const nodes, capPerNode = 16, 400.0
	var wg sync.WaitGroup
	took := make([]time.Duration, nodes)
	errs := make([]error, nodes)
	start := time.Now()
	for n := range nodes {
		dir := t.TempDir()
		f, _ := os.Create(filepath.Join(dir, "traces.jsonl"))
		for l := range 12 {
			f.WriteString(traceLine(n*100+l, 100))
		}
		f.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := time.Now()
			_, errs[n] = delivery.Run(t.Context(), delivery.Options{Dir: dir, Endpoint: be.URL, Headers: map[string]string{"Authorization": "Bearer " + token},
				Compression: "gzip", RateCap: capPerNode, Signals: []string{"traces"}})
			took[n] = time.Since(s)
		}()
	}
	wg.Wait()
	all := time.Since(start)
	for n, err := range errs {
		if err != nil {
			t.Errorf("node %d: %v", n, err)
		}
		if took[n] < 2*time.Second-50*time.Millisecond {
			t.Errorf("node %d sent 1,200 items in %v: faster than its cap of %v/s allows", n, took[n], capPerNode)
		}
	}
	t.Logf("16 nodes × 1,200 spans at %v items/s each: %v in all (%.0f items/s at the backend; the arithmetic: 16 × 400 = 6,400/s after a first second's burst)", capPerNode, all.Round(time.Millisecond), 16*1200/all.Seconds())
	be.Stop(t)
	if n := len(otlptest.MustRead(t, be.Dir, "traces").Spans); n != 16*1200 {
		t.Errorf("the backend holds %d spans, want %d", n, 16*1200)
	}
}

// TestCatchUpThroughput: a backlog of 90,000 items (300 lines of 100 per
// signal, 11 MB of OTLP-JSON) to a real backend, gzip, no cap: every
// item arrives once; the rate and the heap are logged (one line and its
// compressed copy at a time).
func TestCatchUpThroughput(t *testing.T) {
	t.Parallel()
	token := "dl-" + harness.RandHex(8)
	be := harness.StartBackend(t, token)
	dir := t.TempDir()
	appendLines(t, dir, 0, 300, 100)
	var size int64
	for _, sig := range delivery.Signals {
		fi, _ := os.Stat(filepath.Join(dir, sig+".jsonl"))
		size += fi.Size()
	}
	var peak atomic.Uint64
	stop := make(chan struct{})
	go func() {
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	}()
	start := time.Now()
	st, err := delivery.Run(t.Context(), delivery.Options{Dir: dir, Endpoint: be.URL, Headers: map[string]string{"Authorization": "Bearer " + token}, Compression: "gzip", RateCap: -1})
	took := time.Since(start)
	close(stop)
	if err != nil {
		t.Fatal(err)
	}
	tot := st.Total()
	t.Logf("backlog of %d items, %.1f MB: %v, %.0f items/s, %.1f MB/s; peak heap in use %.1f MiB (this test process, the backend apart)",
		tot.Items, float64(size)/1e6, took.Round(time.Millisecond), float64(tot.Items)/took.Seconds(), float64(size)/1e6/took.Seconds(), float64(peak.Load())/(1<<20))
	if tot.Accepted != 90000 || tot.Requests != 12 {
		t.Errorf("stats %+v", tot)
	}
	backendHolds(t, be, 300*100, 0)
}

// storeNoAnswer is a real listener that forwards every request to
// upstream (which stores it) and never passes its answer back: a backend
// that stored a request and then hung, or a sender stopped before the
// answer came. It counts the connections it forwarded.
func storeNoAnswer(t *testing.T, upstream string) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", strings.TrimPrefix(upstream, "http://"))
			if err != nil {
				c.Close()
				continue
			}
			n.Add(1)
			mu.Lock()
			held = append(held, c, u)
			mu.Unlock()
			go io.Copy(u, c)
			go io.Copy(io.Discard, u)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	return "http://" + l.Addr().String(), &n
}

// TestStoppedInFlightCountsDuplicates: a sender is stopped while its
// request, already stored by the backend, has no answer yet (as a
// supervisor killed mid-request). The checkpoint says a sender was at
// work (InFlight); the next delivery sends that line again and counts its
// items in the duplicates bound: the backend holds them twice, within
// the bound, and every other item once.
func TestStoppedInFlightCountsDuplicates(t *testing.T) {
	t.Parallel()
	token := "dl-" + harness.RandHex(8)
	be := harness.StartBackend(t, token)
	dir := t.TempDir()
	appendLines(t, dir, 0, 3, 6)
	hung, forwarded := storeNoAnswer(t, be.URL)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := delivery.Run(ctx, delivery.Options{Dir: dir, Endpoint: hung, Headers: map[string]string{"Authorization": "Bearer " + token},
			Timeout: time.Minute, Signals: []string{"traces"}, MaxBatchItems: 6})
		done <- err
	}()
	harness.WaitFor(t, 10*time.Second, "the first request at the backend", func() bool {
		d, err := otlptest.ReadGrowing(filepath.Join(be.Dir, "traces.jsonl"))
		return err == nil && forwarded.Load() == 1 && len(d.Spans) == 6
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("stopped sender: %v", err)
	}
	if p := mustCheckpoint(t, dir).Files["traces.jsonl"]; p == nil || p.InFlight != 6 || p.Offset != 0 {
		t.Fatalf("checkpoint after the stop %+v: want the first line's 6 spans in flight at offset 0", p)
	}
	st, err := delivery.Run(t.Context(), delivery.Options{Dir: dir, Endpoint: be.URL, Headers: map[string]string{"Authorization": "Bearer " + token}, Signals: []string{"traces"}})
	if err != nil {
		t.Fatal(err)
	}
	p := mustCheckpoint(t, dir).Files["traces.jsonl"]
	if tot := st.Total(); tot.DuplicatesBound != 6 || tot.Accepted != 18 || p.InFlight != 0 || p.DuplicatesBound != 6 {
		t.Errorf("stats %+v, checkpoint %+v: want the first line's 6 spans as the duplicates bound, 18 accepted, nothing in flight", tot, p)
	}
	be.Stop(t)
	tr := otlptest.MustRead(t, be.Dir, "traces")
	ids := map[string]int{}
	for _, s := range tr.Spans {
		ids[s.SpanID]++
	}
	if len(ids) != 18 || len(tr.Spans) != 24 {
		t.Errorf("the backend holds %d spans, %d distinct: want 24 (the stored line twice), 18 distinct", len(tr.Spans), len(ids))
	}
}

// TestLiveLatencyThroughFiles: the live path as the package doc designs
// it, with real parts: a collector receives spans over OTLP/HTTP and
// writes them with the file exporter as the plugin renders it (append,
// flush_interval 1s); a follower (Poll 250 ms) sends each new line to a
// real backend. The latency from a span's arrival at the collector to
// the backend's acknowledgement is the file exporter's flush, the poll
// and a round trip: measured here, each within 1 s + 250 ms + slack.
func TestLiveLatencyThroughFiles(t *testing.T) {
	t.Parallel()
	token := "dl-" + harness.RandHex(8)
	be := harness.StartBackend(t, token)
	dir := harness.SharedDir(t)
	recv, health := harness.FreePort(t), harness.FreePort(t)
	cfg := fmt.Sprintf(`extensions:
  health_check:
    endpoint: 127.0.0.1:%d
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
exporters:
  file/traces:
    path: %q
    append: true
    flush_interval: 1s
service:
  extensions: [health_check]
  telemetry:
    metrics:
      level: none
  pipelines:
    traces: {receivers: [otlp], exporters: [file/traces]}
`, health, recv, filepath.Join(dir, "traces.jsonl"))
	cfgPath := filepath.Join(dir, "collector.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	harness.StartProc(t, "collector", []string{"PATH=/usr/bin:/bin"}, testenv.Collector(t), "--config", cfgPath)
	harness.WaitFor(t, 20*time.Second, "the collector's health check", func() bool { return harness.HTTPOK(fmt.Sprintf("http://127.0.0.1:%d/", health)) })

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := delivery.Run(ctx, delivery.Options{Dir: dir, Endpoint: be.URL, Headers: map[string]string{"Authorization": "Bearer " + token},
			Compression: "gzip", Signals: []string{"traces"}, Follow: true, Poll: delivery.DefaultPoll})
		done <- err
	}()
	const n = 8
	var lat []time.Duration
	for i := range n {
		body := traceLine(1000+i, 3)
		at := time.Now()
		resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/traces", recv), "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("the collector answered %d", resp.StatusCode)
		}
		for {
			if p := mustCheckpoint(t, dir).Files["traces.jsonl"]; p != nil && p.Items >= int64(3*(i+1)) {
				break
			}
			if time.Since(at) > 10*time.Second {
				t.Fatalf("span batch %d not acknowledged within 10 s", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
		lat = append(lat, time.Since(at))
		time.Sleep(time.Duration(137*i%1000) * time.Millisecond) // spread over the flush's phase
	}
	cancel()
	<-done
	var worst, sum time.Duration
	for _, l := range lat {
		worst = max(worst, l)
		sum += l
	}
	t.Logf("span arrival to backend acknowledgement through the files: mean %v, worst %v (%v)", (sum / n).Round(time.Millisecond), worst.Round(time.Millisecond), lat)
	if worst > time.Second+delivery.DefaultPoll+time.Second {
		t.Errorf("worst latency %v: more than the flush (1 s), the poll (%v) and 1 s of slack", worst, delivery.DefaultPoll)
	}
	be.Stop(t)
	if got := len(otlptest.MustRead(t, be.Dir, "traces").Spans); got != 3*n {
		t.Errorf("the backend holds %d spans, want %d", got, 3*n)
	}
}

// TestBacklogs: before a delivery everything is backlog; a delivery
// stopped by a 401 leaves it all; after one that was answered only the
// lines written since (and a half line, not counted as a line) are.
func TestBacklogs(t *testing.T) {
	t.Parallel()
	token := "dl-" + harness.RandHex(8)
	be := harness.StartBackend(t, token)
	dir := t.TempDir()
	appendLines(t, dir, 0, 5, 4)
	b, err := delivery.Backlogs(dir)
	if err != nil || len(b) != 3 || b["traces.jsonl"].Lines != 5 || b["metrics.jsonl"].Items != 20 || b["logs.jsonl"].Partial != 0 {
		t.Fatalf("before: %+v %v", b, err)
	}
	if _, err := delivery.Run(t.Context(), delivery.Options{Dir: dir, Endpoint: be.URL, Headers: map[string]string{"Authorization": "Bearer wrong"}}); err == nil {
		t.Fatal("a wrong token delivered")
	}
	if b, _ := delivery.Backlogs(dir); b["traces.jsonl"].Items != 20 {
		t.Errorf("after a 401: %+v, want everything left", b)
	}
	if _, err := delivery.Run(t.Context(), delivery.Options{Dir: dir, Endpoint: be.URL, Headers: map[string]string{"Authorization": "Bearer " + token}}); err != nil {
		t.Fatal(err)
	}
	appendLines(t, dir, 5, 7, 4)
	f, _ := os.OpenFile(filepath.Join(dir, "traces.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"resourceSpans":`)
	f.Close()
	b, err = delivery.Backlogs(dir)
	if err != nil || b["traces.jsonl"].Lines != 2 || b["traces.jsonl"].Items != 8 || b["traces.jsonl"].Partial != 17 || b["logs.jsonl"].Items != 8 {
		t.Errorf("after: %+v %v, want the 2 new lines (8 items each file) and a 17-byte half line", b, err)
	}
}

// TestReplacedOrTruncatedFile: a file truncated below the checkpoint's
// offset, or replaced by another file, is an error naming it, for Run and
// for Backlogs: the offset would mean nothing there.
func TestReplacedOrTruncatedFile(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{}`) }))
	defer srv.Close()
	dir := t.TempDir()
	appendLines(t, dir, 0, 3, 2)
	opt := delivery.Options{Dir: dir, Endpoint: srv.URL, Signals: []string{"traces"}}
	if _, err := delivery.Run(t.Context(), opt); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "traces.jsonl")
	if err := os.Truncate(path, 10); err != nil {
		t.Fatal(err)
	}
	_, err := delivery.Run(t.Context(), opt)
	_, berr := delivery.Backlogs(dir)
	for _, e := range []error{err, berr} {
		if e == nil || !strings.Contains(e.Error(), path+": 10 bytes, shorter than the checkpoint's offset") {
			t.Errorf("truncated: %v", e)
		}
	}
	os.Remove(path)
	os.WriteFile(path, []byte(strings.Repeat(traceLine(9, 2), 4)), 0o600)
	_, err = delivery.Run(t.Context(), opt)
	_, berr = delivery.Backlogs(dir)
	for _, e := range []error{err, berr} {
		if e == nil || !strings.Contains(e.Error(), "it was replaced") {
			t.Errorf("replaced: %v", e)
		}
	}
}

// TestBacklogDoesNotStarveOtherFiles: a long traces backlog under the
// rate cap (4,000 spans at 1,000/s) does not hold back a new metrics
// line: the files take turns, and the metrics line is acknowledged within
// a second and a half while the traces are still catching up.
func TestBacklogDoesNotStarveOtherFiles(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{}`) }))
	defer srv.Close()
	dir := t.TempDir()
	f, _ := os.Create(filepath.Join(dir, "traces.jsonl"))
	for l := range 40 {
		f.WriteString(traceLine(l, 100))
	}
	f.Close()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := delivery.Run(ctx, delivery.Options{Dir: dir, Endpoint: srv.URL, RateCap: 1000, Follow: true, Poll: 20 * time.Millisecond})
		done <- err
	}()
	time.Sleep(500 * time.Millisecond)
	os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte(metricLine(0, 10)), 0o600)
	at := time.Now()
	harness.WaitFor(t, 10*time.Second, "the metrics line's acknowledgement", func() bool {
		p := mustCheckpoint(t, dir).Files["metrics.jsonl"]
		return p != nil && p.Items == 10
	})
	took := time.Since(at)
	tr := mustCheckpoint(t, dir).Files["traces.jsonl"]
	cancel()
	<-done
	t.Logf("the metrics line acknowledged %v after it was written, %d of 4,000 spans acknowledged then", took.Round(time.Millisecond), tr.Items)
	if took > 1500*time.Millisecond || tr.Items >= 4000 {
		t.Errorf("the metrics line waited %v (traces at %d of 4,000): the traces backlog held it back", took, tr.Items)
	}
}

// TestMain builds the real CLI for the test on a supervisor's files.
func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }

// TestRealJobFiles: the files a real supervisor and collector wrote for a
// job whose backend was down the whole time (spans, logs, the model
// service's metrics, the span metrics and phase lines appended after the
// collector's exit), delivered afterwards to a real backend: it holds
// exactly the files' items; a second delivery sends nothing, and the
// backlog is empty.
func TestRealJobFiles(t *testing.T) {
	t.Parallel()
	token := "dl-" + harness.RandHex(8)
	j := harness.Job{JobID: "5252", Token: token, VLLMPort: harness.StartVLLM(t)}
	j.Record = filepath.Join(harness.SharedDir(t), "record")
	if err := os.WriteFile(j.Record, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := harness.StartSup(t, j).MustReady(t)
	harness.WaitMetricNames(t, s, 20*time.Second, "vllm_e2e_request_latency_seconds")
	s.RunGym(t, "agent", 3, "local")
	if _, err := s.Drain(t, 60*time.Second); err != nil {
		t.Fatalf("drain: %v\n%s", err, s.Output())
	}
	tr, m, lg := otlptest.MustRead(t, s.Out, "traces"), otlptest.MustRead(t, s.Out, "metrics"), otlptest.MustRead(t, s.Out, "logs")
	be := harness.StartBackend(t, token)
	headers, err := delivery.TokenHeaders("OTEL_TOKEN", func(string) (string, bool) { return token, true })
	if err != nil {
		t.Fatal(err)
	}
	opt := delivery.Options{Dir: s.Out, Endpoint: be.URL, Headers: headers, Compression: "gzip"}
	start := time.Now()
	st, err := delivery.Run(t.Context(), opt)
	if err != nil {
		t.Fatal(err)
	}
	tot := st.Total()
	t.Logf("the job's files (%d spans, %d points, %d log records): %d lines in %d requests, %v", len(tr.Spans), m.Points(), len(lg.Logs), tot.Lines, tot.Requests, time.Since(start).Round(time.Millisecond))
	if want := int64(len(tr.Spans) + m.Points() + len(lg.Logs)); tot.Accepted != want || tot.Rejected != 0 || tot.BadLines != 0 {
		t.Errorf("stats %+v: want %d items accepted", tot, want)
	}
	if st, err := delivery.Run(t.Context(), opt); err != nil || st.Total().Requests != 0 {
		t.Errorf("a second delivery: %+v %v, want nothing sent", st.Total(), err)
	}
	b, err := delivery.Backlogs(s.Out)
	if err != nil {
		t.Fatal(err)
	}
	for name, x := range b {
		if x.Lines != 0 || x.Partial != 0 {
			t.Errorf("%s: backlog %+v after the delivery", name, x)
		}
	}
	be.Stop(t)
	bt, bm, bl := otlptest.MustRead(t, be.Dir, "traces"), otlptest.MustRead(t, be.Dir, "metrics"), otlptest.MustRead(t, be.Dir, "logs")
	if len(bt.Spans) != len(tr.Spans) || bm.Points() != m.Points() || len(bl.Logs) != len(lg.Logs) {
		t.Errorf("the backend holds %d spans, %d points, %d log records; the files %d, %d, %d", len(bt.Spans), bm.Points(), len(bl.Logs), len(tr.Spans), m.Points(), len(lg.Logs))
	}
	for _, n := range []string{"gym.rollout", vocab.SpanDrain, vocab.SpanJob} {
		if bt.SpanCount(n) != tr.SpanCount(n) || tr.SpanCount(n) == 0 {
			t.Errorf("%s: %d spans at the backend, %d in the files", n, bt.SpanCount(n), tr.SpanCount(n))
		}
	}
	c, _ := bm.SpanMetrics()
	fc, _ := m.SpanMetrics()
	for n, v := range fc {
		if c[n] != v {
			t.Errorf("span metrics of %s: calls %v at the backend, %v in the files", n, c[n], v)
		}
	}
}

// TestResourceAttributes: with ResourceAttributes (otel.token_resource_attribute:
// the token as the Authorization resource attribute) the backend (a real
// collector with bearer-token auth) holds every item with the attribute on
// its resource, a resource's own attribute of that key replaced and its
// others kept; the files are unchanged and the checkpoint names the
// attribute, never its value.
func TestResourceAttributes(t *testing.T) {
	t.Parallel()
	token := "ra-" + harness.RandHex(8)
	be := harness.StartBackend(t, token)
	dir := t.TempDir()
	appendLines(t, dir, 0, 5, 10)
	own := `{"resourceSpans":[{"resource":{"attributes":[{"key":"Authorization","value":{"stringValue":"forged"}},{"key":"service.name","value":{"stringValue":"own"}}]},"scopeSpans":[{"spans":[{"traceId":"0000000000000000000000000000ffff","spanId":"00000000ffff0001","name":"own","startTimeUnixNano":"1","endTimeUnixNano":"2"}]}]},{"scopeSpans":[{"spans":[{"traceId":"0000000000000000000000000000ffff","spanId":"00000000ffff0002","name":"bare","startTimeUnixNano":"1","endTimeUnixNano":"2"}]}]}]}` + "\n"
	f, err := os.OpenFile(filepath.Join(dir, "traces.jsonl"), os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(own)
	f.Close()
	before, _ := os.ReadFile(filepath.Join(dir, "traces.jsonl"))
	bearer := "Bearer " + token
	st, err := delivery.Run(t.Context(), delivery.Options{Dir: dir, Endpoint: be.URL, Headers: map[string]string{"Authorization": bearer},
		Compression: "gzip", ResourceAttributes: map[string]string{"Authorization": bearer}})
	if err != nil {
		t.Fatal(err)
	}
	if tot := st.Total(); tot.Accepted != 3*50+2 || tot.Rejected != 0 {
		t.Errorf("stats %+v: want 152 items accepted", tot)
	}
	after, _ := os.ReadFile(filepath.Join(dir, "traces.jsonl"))
	if string(after) != string(before) || strings.Contains(string(after), token) {
		t.Error("the sender changed the file, or the file holds the token")
	}
	cpRaw, _ := os.ReadFile(filepath.Join(dir, delivery.CheckpointFile))
	if cp := mustCheckpoint(t, dir); len(cp.ResourceAttributes) != 1 || cp.ResourceAttributes[0] != "Authorization" || strings.Contains(string(cpRaw), token) {
		t.Errorf("checkpoint names %v (want [Authorization], never the value):\n%s", cp.ResourceAttributes, cpRaw)
	}
	be.Stop(t)
	tr, m, lg := otlptest.MustRead(t, be.Dir, "traces"), otlptest.MustRead(t, be.Dir, "metrics"), otlptest.MustRead(t, be.Dir, "logs")
	if len(tr.Spans) != 52 || m.Points() != 50 || len(lg.Logs) != 50 {
		t.Fatalf("the backend holds %d spans, %d points, %d log records; want 52, 50, 50", len(tr.Spans), m.Points(), len(lg.Logs))
	}
	check := func(what string, res otlptest.Attrs) {
		if v, _ := res.Str("Authorization"); v != bearer {
			t.Errorf("%s: resource Authorization %q, want the bearer token", what, v)
		}
	}
	for _, s := range tr.Spans {
		check("span "+s.Name, s.Resource)
		if s.Name == "own" {
			if v, _ := s.Resource.Str("service.name"); v != "own" {
				t.Errorf("span own: the resource's service.name %q lost", v)
			}
		}
		if s.Name == "work.0" {
			if v, _ := s.Resource.Str("service.name"); v != "delivery-test" {
				t.Errorf("span work.0: the resource's service.name %q lost", v)
			}
		}
	}
	for _, mt := range m.Metrics {
		check("metric "+mt.Name, mt.Resource)
	}
	for _, l := range lg.Logs {
		check("log record", l.Resource)
	}
}

// TestLock: one process at a time holds a node dir's delivery lock; a
// second Lock is refused with a LockedError until the first is released,
// and the lock file stays empty.
func TestLock(t *testing.T) {
	dir := t.TempDir()
	release, err := delivery.Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = delivery.Lock(dir)
	var locked *delivery.LockedError
	if !errors.As(err, &locked) || locked.Dir != dir {
		t.Fatalf("a second Lock while the first is held: %v, want a LockedError for %s", err, dir)
	}
	release()
	release2, err := delivery.Lock(dir)
	if err != nil {
		t.Fatalf("Lock after the release: %v", err)
	}
	release2()
	if fi, err := os.Stat(filepath.Join(dir, delivery.LockFile)); err != nil || fi.Size() != 0 {
		t.Errorf("the lock file: %v, %v", fi, err)
	}
}

// TestLockRefusesWhatIsNotAFile: a FIFO or a link in the lock's place is
// an error at once (no open blocks, no link is followed), never a lock.
func TestLockRefusesWhatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, delivery.LockFile), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := delivery.Lock(dir); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a FIFO as the lock: locked")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lock blocked on a FIFO")
	}
	dir2 := t.TempDir()
	target := filepath.Join(t.TempDir(), "elsewhere")
	os.WriteFile(target, nil, 0o600)
	if err := os.Symlink(target, filepath.Join(dir2, delivery.LockFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := delivery.Lock(dir2); err == nil {
		t.Error("a link as the lock: followed and locked")
	}
}

// TestSlowBackendSplitsRequests: a backend that takes longer than the
// request timeout for a request of more than 30 spans (as a slow proxy or
// a loaded collector does for a full request) and answers smaller ones at
// once. The sender does not send the same request again and again: the
// lines of a request that timed out go again in requests of half its
// size, every span reaches the backend, and the duplicates bound counts
// the timed-out requests' items.
func TestSlowBackendSplitsRequests(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	got := map[string]int{}
	var slow, fast int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := strings.Count(string(body), `"spanId"`)
		if n > 30 {
			mu.Lock()
			slow++
			mu.Unlock()
			select {
			case <-time.After(2 * time.Second):
			case <-r.Context().Done():
			}
			return
		}
		mu.Lock()
		fast++
		for _, m := range strings.Split(string(body), `"spanId":"`)[1:] {
			got[m[:16]]++
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("{}"))
	}))
	defer srv.Close()
	dir := t.TempDir()
	appendLines(t, dir, 0, 16, 10) // 16 lines of 10 spans
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	st, err := delivery.Run(ctx, delivery.Options{Dir: dir, Endpoint: srv.URL, Timeout: 300 * time.Millisecond,
		Retry: delivery.Retry{Initial: 50 * time.Millisecond}, Signals: []string{"traces"}, RateCap: -1, MinSplitItems: 1})
	if err != nil {
		t.Fatalf("%v (the sender did not advance past requests the backend is too slow for)", err)
	}
	tot := st.Total()
	t.Logf("%d requests timed out, %d answered: %+v", slow, fast, tot)
	if len(got) != 160 || tot.Accepted != 160 {
		t.Errorf("the backend holds %d distinct spans, %d accepted: want 160", len(got), tot.Accepted)
	}
	// 160 spans: the full request, then halves of 80 and 40 timed out,
	// each counting its items as possible duplicates; then requests of 20
	// and, below the 40 that timed out, 30 spans (whole lines of 10),
	// answered at once: no request of 40 or more again within SplitHold.
	if slow != 3 || tot.DuplicatesBound != 160+80+40 {
		t.Errorf("%d timed-out requests, duplicates bound %d: want 3 (160, 80, 40 spans) and 280", slow, tot.DuplicatesBound)
	}
}

// TestSlowBackendSplitsALine: the collector writes a whole batch (up to
// 8,192 items) as one line, so a request of one line cannot be made
// smaller by lines. The backend of TestSlowBackendSplitsRequests (too
// slow for more than 30 spans) gets a line of 100 spans over two
// resources, and the metrics and logs lines of 100 items: the line's
// items go in parts, each span reaches the backend once with its
// resource, and the offset moves past the line only once every part was
// answered.
func TestSlowBackendSplitsALine(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	got := map[string]string{} // span id: its resource's service.name
	items := map[string]int{}
	slow := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		sig := strings.TrimPrefix(r.URL.Path, "/v1/")
		d, err := otlptest.Parse(body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		n := len(d.Spans) + len(d.Logs)
		for _, m := range d.Metrics {
			n += m.Points()
		}
		if n > 30 {
			mu.Lock()
			slow++
			mu.Unlock()
			select {
			case <-time.After(2 * time.Second):
			case <-r.Context().Done():
			}
			return
		}
		mu.Lock()
		items[sig] += n
		for _, s := range d.Spans {
			got[s.SpanID], _ = s.Resource.Str("service.name")
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("{}"))
	}))
	defer srv.Close()
	dir := t.TempDir()
	one := strings.TrimSuffix(traceLine(0, 50), "\n")
	two := strings.Replace(strings.TrimSuffix(traceLine(1, 50), "\n"), "delivery-test", "delivery-test-2", 1)
	line := one[:len(one)-2] + "," + two[len(`{"resourceSpans":[`):] + "\n"
	os.WriteFile(filepath.Join(dir, "traces.jsonl"), []byte(line), 0o600)
	// 100 metrics of one point each (the metric is the unit a split keeps
	// whole).
	var ms []string
	for i := range 100 {
		ms = append(ms, fmt.Sprintf(`{"name":"g%d","gauge":{"dataPoints":[{"timeUnixNano":"1700000000000000000","asDouble":%d.5}]}}`, i, i))
	}
	os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte(`{"resourceMetrics":[{"resource":{},"scopeMetrics":[{"metrics":[`+strings.Join(ms, ",")+"]}]}]}\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "logs.jsonl"), []byte(logLine(0, 100)), 0o600)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	st, err := delivery.Run(ctx, delivery.Options{Dir: dir, Endpoint: srv.URL, Timeout: 300 * time.Millisecond,
		Retry: delivery.Retry{Initial: 50 * time.Millisecond}, RateCap: -1, MinSplitItems: 1})
	if err != nil {
		t.Fatalf("%v (the sender did not advance past a line the backend is too slow for)", err)
	}
	tot := st.Total()
	t.Logf("%d requests timed out; %+v; the backend got %v", slow, tot, items)
	if len(got) != 100 || tot.Accepted != 300 || items["traces"] != 100 || items["metrics"] != 100 || items["logs"] != 100 {
		t.Errorf("the backend holds %d distinct spans, %v items, %d accepted: want 100 of each signal", len(got), items, tot.Accepted)
	}
	for id, svc := range got {
		if want := map[bool]string{true: "delivery-test", false: "delivery-test-2"}[strings.HasPrefix(id, "00000001")]; svc != want {
			t.Errorf("span %s arrived with service.name %q, want %q", id, svc, want)
		}
	}
	if cp := mustCheckpoint(t, dir); !caughtUp(dir) || cp.Files["traces.jsonl"].InFlight != 0 {
		t.Errorf("checkpoint %+v: want every file answered, nothing in flight", cp.Files["traces.jsonl"])
	}
}
