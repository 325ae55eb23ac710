package render_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metricsv1 "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/proto"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/inspect"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/helper/selfmetrics"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// nodeExporterBin is Debian's node_exporter.
const nodeExporterBin = "/usr/bin/prometheus-node-exporter"

// freeTCPPort is a port free on 127.0.0.1 when asked.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// nodeExporterPage is one page of the real node_exporter of this machine.
func nodeExporterPage(t *testing.T) []byte {
	t.Helper()
	if _, err := os.Stat(nodeExporterBin); err != nil {
		t.Skipf("%s: %v", nodeExporterBin, err)
	}
	port := strconv.Itoa(freeTCPPort(t))
	cmd := exec.Command(nodeExporterBin, "--web.listen-address=127.0.0.1:"+port)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://127.0.0.1:" + port + "/metrics")
		if err == nil {
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode == 200 {
				return b
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("node_exporter did not answer within 10 s: %v", err)
		}
	}
}

// nodeRun is what one collector run of the node-only job left.
type nodeRun struct {
	fileBytes int64
	scrapes   int             // the node job's up points in the file
	fileNames map[string]bool // metric names in the file
	sentNames map[string]bool // metric names the backend received
	hosts     []inspect.Host
	filtered  int64 // filter/node_local's points dropped, from the collector's telemetry (-1: not read)
}

// runNodeJob renders the configuration of a job whose only target is the
// node_exporter page served at nodePort (interval 1 s), with otel items
// spec over testdata/site.yaml and the backend at backend; runs the real
// collector for 6 s and reads its files.
func runNodeJob(t *testing.T, spec string, nodePort int, backend *nodeBackend) nodeRun {
	t.Helper()
	r, err := config.Resolve(config.Inputs{SiteFile: "testdata/site.yaml", Spec: spec, WorkDir: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	r.Otel.GPUMetricsPort, r.Otel.NodeMetricsPort, r.Otel.ScrapeIntervalSeconds = 0, nodePort, 1
	r.Otel.Endpoint = backend.url
	job := t.TempDir()
	out := filepath.Join(job, "otel")
	if err := os.MkdirAll(out, 0o700); err != nil {
		t.Fatal(err)
	}
	in := render.Input{Resolved: r, Job: render.Job{JobID: "77", Node: "gn1", RunID: "r"},
		Ports:     render.Ports{OTLPGRPC: freeTCPPort(t), OTLPHTTP: freeTCPPort(t), Health: freeTCPPort(t), Telemetry: freeTCPPort(t)},
		OutputDir: out}
	y, err := render.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(job, "collector.yaml")
	if err := os.WriteFile(path, y, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testenv.Collector(t), "--config", path)
	cmd.Env = append(os.Environ(), "OTEL_TOKEN=t", render.ReceiverTokenEnv+"=r", render.PluginTokenEnv+"=p")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second)
	// The filter's own counter, which the receipt reads (FileFiltered).
	var filtered int64 = -1
	if resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(in.Ports.Telemetry) + "/metrics"); err == nil {
		if m, err := selfmetrics.ParseText(resp.Body); err == nil {
			filtered = m.Filtered(render.NodeLocalFilter)
		}
		resp.Body.Close()
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the collector did not stop within 60 s of SIGTERM:\n%s", logs.String())
	}
	st, err := os.Stat(filepath.Join(out, "metrics.jsonl"))
	if err != nil {
		t.Fatalf("%v\n%s", err, logs.String())
	}
	d, err := otlptest.Read(filepath.Join(out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	run := nodeRun{fileBytes: st.Size(), fileNames: map[string]bool{}, sentNames: backend.take(), filtered: filtered}
	for _, m := range d.Metrics {
		run.fileNames[m.Name] = true
		if m.Name == "up" {
			run.scrapes += m.Points()
		}
	}
	rep, err := inspect.Build(job)
	if err != nil {
		t.Fatal(err)
	}
	run.hosts = rep.Hosts
	return run
}

// nodeBackend is an OTLP/HTTP backend that keeps the metric names it got.
type nodeBackend struct {
	url   string
	mu    sync.Mutex
	names map[string]bool
}

func newNodeBackend(t *testing.T) *nodeBackend {
	b := &nodeBackend{names: map[string]bool{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			body = zr
		}
		raw, _ := io.ReadAll(body)
		if strings.HasSuffix(r.URL.Path, "/v1/metrics") {
			var req metricsv1.MetricsData // the wire form of ExportMetricsServiceRequest
			if err := proto.Unmarshal(raw, &req); err == nil {
				b.mu.Lock()
				for _, rm := range req.ResourceMetrics {
					for _, sm := range rm.ScopeMetrics {
						for _, m := range sm.Metrics {
							b.names[m.Name] = true
						}
					}
				}
				b.mu.Unlock()
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(200)
	}))
	t.Cleanup(srv.Close)
	b.url = srv.URL
	return b
}

func (b *nodeBackend) take() map[string]bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.names
	b.names = map[string]bool{}
	return out
}

// TestNodeLocalAllowlist: with the real collector scraping a page of the
// machine's real node_exporter (served unchanged each scrape), the job's
// metrics file keeps only the node_exporter series local_node_metrics
// allows (and up, scrape_*) while the backend gets every series (with
// delivery: collector, the collector's exporter: with the default delivery
// from the files the backend gets what the file holds); with
// local_node_metrics null the file keeps all. The default file holds at
// most a tenth of the bytes of the file that keeps all, and inspect's host
// section is the same from both. The bytes per node-hour at a 15 s
// interval are logged (bytes per scrape times 240).
func TestNodeLocalAllowlist(t *testing.T) {
	page := nodeExporterPage(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(page)
	}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = l
	srv.Start()
	defer srv.Close()
	port := l.Addr().(*net.TCPAddr).Port
	backend := newNodeBackend(t)

	all := runNodeJob(t, "local_node_metrics=null,delivery=collector", port, backend)
	def := runNodeJob(t, "delivery=collector", port, backend)

	allow := regexp.MustCompile("^(?:up|scrape_.*|" + strings.Join(config.DefaultLocalNodeMetrics, "|") + ")$")
	outside := 0
	for n := range def.fileNames {
		if !allow.MatchString(n) {
			t.Errorf("the default file holds %s, outside local_node_metrics", n)
		}
	}
	for n := range all.fileNames {
		if !allow.MatchString(n) {
			outside++
			if !def.sentNames[n] {
				t.Errorf("the backend did not get %s in the default run", n)
			}
		}
	}
	if outside == 0 {
		t.Fatalf("node_exporter's page has no series outside the allowlist: nothing measured (%d names)", len(all.fileNames))
	}
	for _, n := range []string{"node_cpu_seconds_total", "node_memory_MemTotal_bytes", "node_memory_MemAvailable_bytes", "node_load1", "up"} {
		if !def.fileNames[n] {
			t.Errorf("the default file lacks %s", n)
		}
	}
	if all.filtered != 0 || def.filtered <= 0 {
		t.Errorf("filter/node_local's counter: %d keeping all (want 0: no such filter), %d by default (want > 0)", all.filtered, def.filtered)
	}
	if all.scrapes == 0 || def.scrapes == 0 {
		t.Fatalf("scrapes in the files: %d (all), %d (default)", all.scrapes, def.scrapes)
	}
	perAll, perDef := all.fileBytes/int64(all.scrapes), def.fileBytes/int64(def.scrapes)
	t.Logf("node_exporter page %d bytes, %d names outside the allowlist; metrics.jsonl per scrape: %d bytes keeping all, %d by default (%.1f%%); per node-hour at 15 s: %.1f MB keeping all, %.1f MB by default",
		len(page), outside, perAll, perDef, 100*float64(perDef)/float64(perAll), float64(perAll*240)/1e6, float64(perDef*240)/1e6)
	if perDef*10 > perAll {
		t.Errorf("the default file holds %d bytes per scrape, more than a tenth of %d", perDef, perAll)
	}
	if len(all.hosts) != 1 || len(def.hosts) != 1 {
		t.Fatalf("hosts: %+v and %+v", all.hosts, def.hosts)
	}
	a, d := all.hosts[0], def.hosts[0]
	if a.Node != d.Node || a.CPUs != d.CPUs || a.MemoryTotal != d.MemoryTotal || a.MemoryUsedMax != d.MemoryUsedMax ||
		a.Load1Max != d.Load1Max || (a.CPUBusy.Known() != d.CPUBusy.Known()) || a.CPUs == 0 || !a.MemoryTotal.Known() {
		t.Errorf("the host section differs: %+v keeping all, %+v by default", a, d)
	}
}
