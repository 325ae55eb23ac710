package selfmetrics_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/helper/selfmetrics"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// exports keeps the last OTLP export of the collector's own metrics.
type exports struct {
	mu   sync.Mutex
	last []byte
}

func (e *exports) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	if r.URL.Path == "/v1/metrics" {
		e.mu.Lock()
		e.last = b
		e.mu.Unlock()
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

func (e *exports) get() []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.last
}

// spans is an OTLP/HTTP JSON request of n spans.
func spans(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"resourceSpans":[{"resource":{},"scopeSpans":[{"spans":[`)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"traceId":"%032x","spanId":"%016x","name":"s","startTimeUnixNano":"1","endTimeUnixNano":"2"}`, i+1, i+1)
	}
	b.WriteString(`]}]}]}`)
	return []byte(b.String())
}

// The real collector's two readings of its own telemetry, its Prometheus
// text (Scrape) and its OTLP export (ParseOTLP), count the spans it was
// sent: accepted by the receiver, written by the file exporter, sent by
// the backend exporter, by their component ids.
func TestBothReadingsOfTheRealCollector(t *testing.T) {
	bin := testenv.Collector(t)
	dir := t.TempDir()
	own := &exports{}
	backend := httptest.NewServer(own) // the backend and the own-metrics sink
	defer backend.Close()
	in, prom := freePort(t), freePort(t)
	cfg := fmt.Sprintf(`receivers:
  otlp/in:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
exporters:
  %s:
    path: %s
  %s:
    endpoint: %s
    retry_on_failure:
      enabled: false
service:
  telemetry:
    metrics:
      level: normal
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: %d
        - periodic:
            interval: 300
            exporter:
              otlp:
                protocol: http/protobuf
                endpoint: %s/v1/metrics
  pipelines:
    traces:
      receivers: [otlp/in]
      exporters: [%s, %s]
`, in, render.FileExporter("traces"), filepath.Join(dir, "traces.jsonl"), render.BackendExporter, backend.URL, prom, backend.URL,
		render.FileExporter("traces"), render.BackendExporter)
	cfgPath := filepath.Join(dir, "collector.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	cmd := exec.Command(bin, "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	const n = 7
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/traces", in), "application/json", bytes.NewReader(spans(n)))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("the collector answered the spans with HTTP %d", resp.StatusCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collector's receiver never answered: %v\n%s", err, log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	want := map[string]int64{"accepted": n, "written": n, "sent": n}
	figures := func(m selfmetrics.Counters) map[string]int64 {
		return map[string]int64{
			"accepted": m.Of(selfmetrics.ReceiverAccepted, "traces", "otlp/in"),
			"written":  m.Of(selfmetrics.ExporterSent, "traces", render.FileExporter("traces")),
			"sent":     m.Of(selfmetrics.ExporterSent, "traces", render.BackendExporter),
		}
	}
	same := func(a, b map[string]int64) bool { return fmt.Sprint(a) == fmt.Sprint(b) }
	var text, otlp selfmetrics.Counters
	for {
		var errText, errOTLP error
		text, errText = selfmetrics.Scrape(prom)
		if b := own.get(); b != nil {
			otlp, errOTLP = selfmetrics.ParseOTLP(b)
		}
		if errText == nil && errOTLP == nil && same(figures(text), want) && same(figures(otlp), want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: Prometheus text %v (%v), OTLP export %v (%v), want %v\n%s",
				figures(text), errText, figures(otlp), errOTLP, want, log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := text.Sum(selfmetrics.ReceiverAccepted, "traces"); got != n {
		t.Errorf("accepted spans over every receiver: %d, want %d", got, n)
	}
	for _, m := range []selfmetrics.Counters{text, otlp} {
		if got := m.Of(selfmetrics.ReceiverRefused, "traces", "otlp/in") + m.Of(selfmetrics.ExporterSendFailed, "traces", render.BackendExporter); got != 0 {
			t.Errorf("refused or failed spans: %d, want 0", got)
		}
	}
	if _, ok := text[selfmetrics.Key{Name: "exporter_queue_size", Component: render.BackendExporter}]; !ok {
		t.Errorf("the backend exporter's queue gauge is not read from the text: %v", text)
	}
	if sum := text.Add(otlp).Of(selfmetrics.ExporterSent, "traces", render.BackendExporter); sum != 2*n {
		t.Errorf("Add: %d, want %d", sum, 2*n)
	}
	// The collector compresses its text when asked (why Scrape does not
	// ask), and not otherwise.
	for enc, want := range map[string]string{"gzip": "gzip", "identity": ""} {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", prom), nil)
		req.Header.Set("Accept-Encoding", enc)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Content-Encoding"); got != want {
			t.Errorf("Accept-Encoding %s: the collector answered with Content-Encoding %q, want %q", enc, got, want)
		}
	}
}

// TestScrapeAsksForNoCompression: Scrape asks for the text uncompressed
// (Go's client would ask for gzip) and reads it.
func TestScrapeAsksForNoCompression(t *testing.T) {
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.Header.Get("Accept-Encoding"))
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintln(w, `otelcol_receiver_accepted_spans_total{receiver="otlp/in",transport="http"} 3`)
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	m, err := selfmetrics.Scrape(port)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Of(selfmetrics.ReceiverAccepted, "traces", "otlp/in"); got != 3 {
		t.Errorf("accepted spans: %d, want 3 (%v)", got, m)
	}
	if len(asked) != 1 || asked[0] != "identity" {
		t.Errorf("Accept-Encoding asked: %q, want [identity]", asked)
	}
}

// A text that is not the exposition format is an error, not zero figures.
func TestParseTextRefusesGarbage(t *testing.T) {
	for _, in := range []string{
		"otelcol_exporter_sent_spans_total{exporter=\"otlp_http/backend\"} not-a-number\n",
		"otelcol_exporter_sent_spans_total{exporter=\"otlp_http/backend\" 3\n",
	} {
		if m, err := selfmetrics.ParseText(strings.NewReader(in)); err == nil {
			t.Errorf("%q: no error, figures %v", in, m)
		}
	}
}

// The units of the collector's metric names, and their words.
func TestUnits(t *testing.T) {
	for sig, want := range map[string][2]string{
		"traces": {"exporter_sent_spans", "spans"}, "metrics": {"exporter_sent_metric_points", "metric points"},
		"logs": {"exporter_sent_log_records", "log records"},
	} {
		if got := selfmetrics.Item(selfmetrics.ExporterSent, sig); got != want[0] {
			t.Errorf("Item(%s) = %q, want %q", sig, got, want[0])
		}
		if got := selfmetrics.Words(sig); got != want[1] {
			t.Errorf("Words(%s) = %q, want %q", sig, got, want[1])
		}
	}
}

// TestPluginReceiverCounted: the receivers' series of the job's and the
// plugin's own receivers (otlp, otlp/plugin) are kept
// apart by id (Of) and summed by Sum, what the receipt's Received is; the
// file exporter the two pipelines of a signal share is one series.
func TestPluginReceiverCounted(t *testing.T) {
	text := fmt.Sprintf(`# TYPE otelcol_receiver_accepted_spans_total counter
otelcol_receiver_accepted_spans_total{receiver="otlp",transport="http"} 5
otelcol_receiver_accepted_spans_total{receiver="otlp",transport="grpc"} 2
otelcol_receiver_accepted_spans_total{receiver=%q,transport="http"} 9
# TYPE otelcol_receiver_accepted_metric_points_total counter
otelcol_receiver_accepted_metric_points_total{receiver=%q,transport="http"} 40
# TYPE otelcol_exporter_sent_spans_total counter
otelcol_exporter_sent_spans_total{exporter=%q} 16
`, render.PluginReceiver, render.PluginReceiver, render.FileExporter("traces"))
	m, err := selfmetrics.ParseText(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if a, p := m.Of(selfmetrics.ReceiverAccepted, "traces", "otlp"), m.Of(selfmetrics.ReceiverAccepted, "traces", render.PluginReceiver); a != 7 || p != 9 {
		t.Errorf("accepted spans: otlp %d, %s %d; want 7 and 9", a, render.PluginReceiver, p)
	}
	if s := m.Sum(selfmetrics.ReceiverAccepted, "traces"); s != 16 || s != m.Of(selfmetrics.ExporterSent, "traces", render.FileExporter("traces")) {
		t.Errorf("accepted spans summed: %d, want 16, the file exporter's", s)
	}
	if p := m.Of(selfmetrics.ReceiverAccepted, "metrics", render.PluginReceiver); p != 40 {
		t.Errorf("%s accepted %d points, want 40", render.PluginReceiver, p)
	}
}
