package replay

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

func TestCheckEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"otlp.example.com:4318": `no scheme: the OTLP/HTTP exporter needs a URL, e.g. https://otlp.example.com:4318`,
		"127.0.0.1:4318":        "no scheme",
		"ftp://h/x":             `the scheme "ftp" is not http or https`,
		"https://":              "no host",
		"":                      "empty",
		"http://127.0.0.1:4318": "",
		"https://o.example/api": "",
	} {
		err := CheckEndpoint("--endpoint", in)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}

func jobDir(t *testing.T) string {
	job := t.TempDir()
	write(t, filepath.Join(job, "otel", "collector.yaml"), jobConfig)
	write(t, filepath.Join(job, "otel", "traces.jsonl"), traceLine+"\n")
	return job
}

func withToken(string) (string, bool) { return "tok", true }

// An endpoint without a scheme is refused before the collector starts (a
// missing collector would otherwise be the error).
func TestRunRefusesMalformedEndpoint(t *testing.T) {
	_, err := Run(t.Context(), Options{Dir: jobDir(t), Endpoint: "127.0.0.1:4318", TokenEnv: "OTEL_TOKEN", LookupEnv: withToken, Binary: "/nonexistent/otelcol"})
	if err == nil || !strings.Contains(err.Error(), `"127.0.0.1:4318": no scheme`) {
		t.Errorf("err %v, want the endpoint refused", err)
	}
}

// A backend nothing listens on: replay stops before starting the collector,
// saying so, instead of waiting for the exporter's retries.
func TestRunFailsFastWhenUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	res, err := Run(t.Context(), Options{Dir: jobDir(t), Endpoint: closed, TokenEnv: "OTEL_TOKEN", LookupEnv: withToken, Binary: "/bin/true"})
	if res != nil || err == nil || !strings.Contains(err.Error(), "the backend "+closed+" cannot be reached") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("res %v err %v, want the backend unreachable", res, err)
	}
}

// The real collector against a backend that refuses the token: the summary
// tells read from accepted, and gives the exports' cause in one line
// without the resource dump of the collector's log line.
func TestRunCauseInOneLine(t *testing.T) {
	bin := testenv.Collector(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad token", http.StatusUnauthorized)
	}))
	defer srv.Close()
	res, err := Run(t.Context(), Options{Dir: jobDir(t), Endpoint: srv.URL, TokenEnv: "OTEL_TOKEN", LookupEnv: withToken, Binary: bin, Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	sum := strings.Join(res.Summary(), "\n")
	if res.OK() || !strings.Contains(sum, "replay done with LOSSES") || !strings.Contains(sum, "traces  1 file: read 3 of 3 spans (0 refused); backend: 0 of 3 spans accepted, 3 failed, 0 pending") {
		t.Errorf("summary:\n%s", sum)
	}
	var cause string
	for _, l := range res.Summary() {
		if strings.HasPrefix(l, "cause: ") {
			cause = l
		}
	}
	if !strings.Contains(cause, "401") || strings.Contains(cause, "resource") || len(cause) > 310 || strings.Contains(cause, "\n") {
		t.Errorf("cause %q: want one line naming HTTP 401, without the resource", cause)
	}
	// The token is what to check, by the variable it came from.
	if !strings.Contains(sum, "\nhint: the backend did not accept the bearer token: check $OTEL_TOKEN, the variable replay read it from") {
		t.Errorf("no hint naming OTEL_TOKEN:\n%s", sum)
	}
}

// Run with Appended skips the lines the supervisor delivered at the drain:
// when they are all, nothing is sent (no collector starts), the result is
// done and the summary says how many were skipped and why.
func TestRunAppendedAllDelivered(t *testing.T) {
	job := jobDir(t)
	otel := filepath.Join(job, "otel")
	r := &receipt.Receipt{JobID: "1", Node: "n1", Basis: receipt.BasisFinal, Signals: map[string]receipt.Counts{},
		Appended: []receipt.Appended{{File: "traces.jsonl", Offset: 0, Length: int64(len(traceLine) + 1), Spans: 3, Delivered: true}}}
	if err := r.Write(otel); err != nil {
		t.Fatal(err)
	}
	res, err := Run(t.Context(), Options{Dir: job, Appended: true, Endpoint: "http://127.0.0.1:9", TokenEnv: "OTEL_TOKEN", LookupEnv: withToken, Binary: "/nonexistent/otelcol"})
	if err != nil || res == nil || !res.OK() || res.Delivered != 1 || len(res.Signals) != 0 {
		t.Fatalf("res %+v err %v: want nothing sent, one line skipped", res, err)
	}
	sum := strings.Join(res.Summary(), "\n")
	if !strings.Contains(sum, "1 appended line skipped: the supervisor delivered it") || !strings.Contains(sum, "nothing left to send") {
		t.Errorf("summary %q", sum)
	}
	// Forced, it is sent: here to a collector that is not there.
	if _, err := Run(t.Context(), Options{Dir: job, Appended: true, Force: true, Endpoint: "http://127.0.0.1:9", TokenEnv: "OTEL_TOKEN", LookupEnv: withToken, Binary: "/nonexistent/otelcol"}); err == nil || !strings.Contains(err.Error(), "--binary") {
		t.Errorf("forced: err %v, want the collector's start to fail", err)
	}
}

// TestHTTPStatus: the backend's HTTP status is read from the exporter's
// error; none without one.
func TestHTTPStatus(t *testing.T) {
	if s := HTTPStatus("Exporting failed: error exporting items, request to http://x/v1/traces responded with HTTP Status Code 503, Message=busy"); s != 503 {
		t.Errorf("status %d, want 503", s)
	}
	if s := HTTPStatus("dial tcp: connection refused"); s != 0 {
		t.Errorf("status %d, want 0", s)
	}
}

// TestSummaryTokenHint: a 401 or 403 in the cause adds a hint naming the
// token's variable; another status adds none.
func TestSummaryTokenHint(t *testing.T) {
	for _, c := range []struct {
		cause, want string
	}{
		{"Exporting failed. Dropping data.: error exporting items, request to https://b/v1/traces responded with HTTP Status Code 401, Message=bad token", "hint: the backend did not accept the bearer token: check $MY_TOKEN"},
		{"Exporting failed: responded with HTTP Status Code 403", "hint: the backend accepted no data from the bearer token in $MY_TOKEN"},
		{"Exporting failed: responded with HTTP Status Code 503", ""},
	} {
		r := &Result{Endpoint: "https://b", TokenEnv: "MY_TOKEN", Done: true, Cause: c.cause,
			Signals: map[string]*Totals{"traces": {Files: 1, Items: 3, Exported: 3, Accepted: 3, SendFailed: 3}}}
		sum := strings.Join(r.Summary(), "\n")
		if c.want == "" && strings.Contains(sum, "hint:") || c.want != "" && !strings.Contains(sum, c.want) {
			t.Errorf("%s:\n%s", c.cause, sum)
		}
	}
}

// hungListener accepts TCP connections and reads whatever arrives without
// ever answering (a hung backend); it counts the connections it took.
func hungListener(t *testing.T) (url string, conns *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns = &atomic.Int64{}
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
			go io.Copy(io.Discard, c)
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
	return "http://" + l.Addr().String(), conns
}

// hungJobDir is jobDir with an exporter that waits 1 s per request and
// retries for 2 s.
func hungJobDir(t *testing.T) string {
	job := jobDir(t)
	cfg := strings.Replace(strings.Replace(jobConfig, "timeout: 5s", "timeout: 1s", 1), "max_elapsed_time: 30s", "max_elapsed_time: 2s\n      initial_interval: 200ms\n      max_interval: 500ms", 1)
	write(t, filepath.Join(job, "otel", "collector.yaml"), cfg)
	return job
}

// TestRunHungBackend: the real collector against a real listener that
// accepts connections and never answers. The files are intact, so the
// verdict is not LOSSES: it says the backend did not answer within the
// bound (the exporter's timeout and retries), that nothing of the files is
// lost, and to run replay again (Unanswered: the command's exit status 3).
// When --timeout passes first, the same.
func TestRunHungBackend(t *testing.T) {
	bin := testenv.Collector(t)
	hung, conns := hungListener(t)
	start := time.Now()
	res, err := Run(t.Context(), Options{Dir: hungJobDir(t), Endpoint: hung, TokenEnv: "OTEL_TOKEN", LookupEnv: withToken, Binary: bin, Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("replay to a hung backend: %v, %d connections", time.Since(start).Round(time.Millisecond), conns.Load())
	sum := strings.Join(res.Summary(), "\n")
	t.Logf("summary:\n%s", sum)
	if conns.Load() == 0 {
		t.Error("the hung listener took no connection")
	}
	if !res.Done || res.OK() || !res.Unanswered() || res.Silences == 0 || res.Refusals != 0 {
		t.Errorf("done %v ok %v unanswered %v silences %d refusals %d: want done, not ok, unanswered", res.Done, res.OK(), res.Unanswered(), res.Silences, res.Refusals)
	}
	for _, want := range []string{"replay NOT ANSWERED: the backend " + hung + " did not answer within the bound (each request waited up to 1s; each batch was retried for up to 2s): 3 items failed after the retries; nothing of the job's files is lost (they are unchanged): run replay again when the backend answers", "\ncause: "} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary lacks %q", want)
		}
	}
	if strings.Contains(sum, "LOSSES") {
		t.Error("the summary says LOSSES though the files are intact")
	}

	// --timeout before the retries end: not answered either.
	job := jobDir(t) // 5 s per request, retries for 30 s
	res, err = Run(t.Context(), Options{Dir: job, Endpoint: hung, TokenEnv: "OTEL_TOKEN", LookupEnv: withToken, Binary: bin, Timeout: 8 * time.Second})
	if err == nil || res == nil || !res.TimedOut || !res.Unanswered() {
		t.Fatalf("res %+v err %v: want --timeout and unanswered", res, err)
	}
	sum = strings.Join(res.Summary(), "\n")
	if !strings.Contains(sum, "--timeout ") || !strings.Contains(sum, "replay NOT ANSWERED") || !strings.Contains(sum, "nothing of the job's files is lost") {
		t.Errorf("summary after --timeout:\n%s", sum)
	}
}

// TestUnansweredNotOnRefusal: a backend that answered a failure with a
// status, a line that did not parse, or a replay cut short by the caller
// is not "not answered".
func TestUnansweredNotOnRefusal(t *testing.T) {
	base := func() *Result {
		return &Result{Endpoint: "https://b", Done: true, Silences: 2,
			Signals: map[string]*Totals{"traces": {Files: 1, Items: 3, Exported: 3, Accepted: 3, SendFailed: 3}}}
	}
	if r := base(); !r.Unanswered() {
		t.Error("timeouts only: not unanswered")
	}
	r := base()
	r.Refusals = 1
	if r.Unanswered() || !strings.Contains(strings.Join(r.Summary(), "\n"), "LOSSES") {
		t.Error("a refusal with a status: unanswered, or no LOSSES")
	}
	r = base()
	r.Signals["traces"].BadLines = 1
	if r.Unanswered() {
		t.Error("a bad line: unanswered")
	}
	r = base()
	r.Done = false
	if r.Unanswered() {
		t.Error("interrupted (not done, no --timeout): unanswered")
	}
	r = base()
	r.Silences = 0
	if r.Unanswered() {
		t.Error("no failure logged: unanswered")
	}
}
