package replay

import (
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
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

// Once (the supervisor's delivery): the exporter makes one attempt, no
// queue, its timeout within the bound; the backend's HTTP status is read
// from the exporter's error.
func TestOnceConfigAndStatus(t *testing.T) {
	b := &Backend{Exporter: map[string]any{"timeout": "5s", "retry_on_failure": map[string]any{"enabled": true}}}
	y, err := collectorConfig([]File{{Path: "/r/traces.jsonl", Signal: "traces"}}, b, "http://127.0.0.1:9", "OTEL_TOKEN", 4242, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"retry_on_failure:\n            enabled: false", "sending_queue:\n            enabled: false", "timeout: 2s", "poll_interval: 25ms"} {
		if !strings.Contains(string(y), want) {
			t.Errorf("once config lacks %q:\n%s", want, y)
		}
	}
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
