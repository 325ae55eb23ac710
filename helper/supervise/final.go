package supervise

import (
	"compress/gzip"
	"crypto/subtle"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/selfmetrics"
)

// finalSink is the supervisor's loopback OTLP/HTTP endpoint for the
// collector's own metrics (render.Ports.Final). The collector's service
// shuts its pipelines down (receivers stop, processors and exporters flush,
// the backend exporter's queue drains), then its extensions, and only then
// its meter provider (collector v0.161.0, service.Shutdown); a periodic
// reader exports once more when it is shut down. That export, received
// after the drain's SIGTERM, holds the final counters. The Prometheus
// endpoint cannot give them: it closes in the same step.
type finalSink struct {
	token string // the per-job receiver token the collector sends as bearer
	ln    net.Listener
	guard *guardedListener
	srv   *http.Server

	mu   sync.Mutex
	last selfmetrics.Counters
	at   time.Time
}

// maxFinalBody bounds one export's body (a collector's own metrics are a
// few KiB).
const maxFinalBody = 4 << 20

// newFinalSink listens on 127.0.0.1:port (0: a free port) and serves
// until close.
func newFinalSink(token string, port int) (*finalSink, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	f := &finalSink{token: token, ln: ln, guard: newGuardedListener(ln, FinalMaxConns, "the final-figures port")}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/metrics", f.handle)
	f.srv = &http.Server{Handler: mux, ReadHeaderTimeout: FinalHeaderTimeout, IdleTimeout: FinalIdleTimeout,
		ReadTimeout: FinalReadTimeout, WriteTimeout: FinalWriteTimeout, MaxHeaderBytes: 64 << 10}
	go f.srv.Serve(f.guard)
	return f, nil
}

func (f *finalSink) port() int { return f.ln.Addr().(*net.TCPAddr).Port }

func (f *finalSink) close() { f.srv.Close() }

func (f *finalSink) handle(w http.ResponseWriter, r *http.Request) {
	want := "Bearer " + f.token
	if r.Method != http.MethodPost || subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte(want)) != 1 {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	var body io.Reader = http.MaxBytesReader(w, r.Body, maxFinalBody)
	if r.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer gz.Close()
		body = io.LimitReader(gz, maxFinalBody)
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	m, err := selfmetrics.ParseOTLP(b)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.last, f.at = m, time.Now()
	f.mu.Unlock()
	// An empty ExportMetricsServiceResponse.
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

// since returns the last export received after t (nil if none).
func (f *finalSink) since(t time.Time) selfmetrics.Counters {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last == nil || f.at.Before(t) {
		return nil
	}
	return f.last
}
