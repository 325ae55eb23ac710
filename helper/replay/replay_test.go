package replay

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gym-otel-spank/gym-otel-spank/helper/delivery"
	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
)

const traceLine = `{"resourceSpans":[{"resource":{},"scopeSpans":[{"spans":[{"name":"a"},{"name":"b"}]},{"spans":[{"name":"c"}]}]}]}`
const metricLine = `{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"g","gauge":{"dataPoints":[{},{}]}},{"name":"h","histogram":{"dataPoints":[{}]}},{"name":"e","exponentialHistogram":{"dataPoints":[{},{},{}]}},{"name":"s","summary":{"dataPoints":[{}]}}]}]}]}`
const logLine = `{"resourceLogs":[{"scopeLogs":[{"logRecords":[{},{}]}]}]}`

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A job dir with a second node and a later link: every dir is found, and
// each file's items are counted as the file receiver (metrics) and the
// exporter (points) count them; a line that is not JSON is counted bad.
func TestDirsAndScan(t *testing.T) {
	job := t.TempDir()
	otel := filepath.Join(job, "otel")
	write(t, filepath.Join(otel, "traces.jsonl"), traceLine+"\n"+traceLine+"\n")
	write(t, filepath.Join(otel, "metrics.jsonl"), metricLine+"\n{half a line")
	write(t, filepath.Join(otel, "logs.jsonl"), "")
	write(t, filepath.Join(otel, "nodes", "gn2", "logs.jsonl"), logLine+"\n")
	write(t, filepath.Join(otel, "links", "77", "nodes", "gn3", "traces.jsonl"), traceLine+"\n")
	// Entries leading outside the job dir are not followed.
	outside := t.TempDir()
	write(t, filepath.Join(outside, "nodes", "x", "traces.jsonl"), traceLine+"\n")
	if err := os.Symlink(outside, filepath.Join(otel, "links", "66")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "nodes", "x"), filepath.Join(otel, "nodes", "evil")); err != nil {
		t.Fatal(err)
	}
	// One inside is.
	if err := os.Symlink("gn2", filepath.Join(otel, "nodes", "alias")); err != nil {
		t.Fatal(err)
	}
	dirs, skipped, err := Dirs(job)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(otel, "links", "66"), filepath.Join(otel, "nodes", "evil")}; strings.Join(skipped, ",") != strings.Join(want, ",") {
		t.Errorf("skipped %v, want %v", skipped, want)
	}
	if dirs[1] != filepath.Join(otel, "nodes", "alias") {
		t.Errorf("a link inside the job dir is not followed: %v", dirs)
	}
	dirs = append(dirs[:1], dirs[2:]...)
	want := []string{otel, filepath.Join(otel, "nodes", "gn2"), filepath.Join(otel, "links", "77"), filepath.Join(otel, "links", "77", "nodes", "gn3")}
	if strings.Join(dirs, ",") != strings.Join(want, ",") {
		t.Fatalf("dirs %v, want %v", dirs, want)
	}
	files, err := Scan(dirs)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 4 { // the empty logs.jsonl is skipped
		t.Fatalf("%d files: %+v", len(files), files)
	}
	got := map[string]File{}
	for _, f := range files {
		got[strings.TrimPrefix(f.Path, otel+"/")] = f
	}
	if f := got["traces.jsonl"]; f.Lines != 2 || f.Items != 6 || f.Exported != 6 || f.BadLines != 0 {
		t.Errorf("traces: %+v", f)
	}
	if f := got["metrics.jsonl"]; f.Lines != 2 || f.BadLines != 1 || f.Items != 4 || f.Exported != 7 || f.MaxLine != len(metricLine) {
		t.Errorf("metrics: %+v", f)
	}
	if f := got["nodes/gn2/logs.jsonl"]; f.Items != 2 || f.Exported != 2 {
		t.Errorf("logs: %+v", f)
	}
	if f := got["links/77/nodes/gn3/traces.jsonl"]; f.Items != 3 {
		t.Errorf("link's node traces: %+v", f)
	}
	// The same from a relative path.
	t.Chdir(filepath.Dir(job))
	if rd, rs, err := Dirs(filepath.Base(job)); err != nil || len(rd) != 5 || len(rs) != 2 {
		t.Errorf("relative: dirs %v, skipped %v, %v", rd, rs, err)
	}
	if _, _, err := Dirs(filepath.Join(job, "nope")); err == nil {
		t.Error("a missing dir gave no error")
	}
}

const jobConfig = `exporters:
  file/traces:
    path: /x/traces.jsonl
  otlp_http/backend:
    endpoint: https://otlp.example.com/api/otlp
    traces_endpoint: https://otlp.example.com/api/otlp/v1/traces
    headers:
      Authorization: Bearer ${env:MY_TOKEN}
      X-Extra: ${env:HOME}
    timeout: 5s
    compression: gzip
    compression_params:
      level: 1
    retry_on_failure:
      enabled: true
      max_elapsed_time: 30s
      multiplier: 9
    proxy_url: http://proxy.example.com:3128
    auth:
      authenticator: oauth2client
    sending_queue:
      enabled: true
      queue_size: 256
      storage: file_storage/x
processors:
  resource/backend_auth:
    attributes:
      - key: Authorization
        value: Bearer ${env:MY_TOKEN}
        action: upsert
`

// The replay configuration copies only the exporter settings the plugin
// renders (never an endpoint, header, proxy or authenticator of the file),
// sends to the given endpoint with the given token variable, renders its
// own backend_auth when the job had one, one receiver per file, and a
// queue that blocks instead of dropping.
func TestConfig(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "collector.yaml"), jobConfig)
	b, err := ReadBackend(filepath.Join(dir, "collector.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !b.Auth {
		t.Fatalf("backend %+v", b)
	}
	files := []File{{Path: "/r/otel/traces.jsonl", Signal: "traces", MaxLine: 10}, {Path: "/r/otel/nodes/b/traces.jsonl", Signal: "traces"}, {Path: "/r/otel/logs.jsonl", Signal: "logs"}}
	y, err := Config(files, b, "http://127.0.0.1:9", "SITE_TOKEN", 4242)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(y, &doc); err != nil {
		t.Fatal(err)
	}
	recv := doc["receivers"].(map[string]any)
	r0 := recv["otlp_json_file/0"].(map[string]any)
	if len(recv) != 3 || r0["start_at"] != "beginning" || r0["include_file_name"] != false || r0["max_log_size"] != 10+1<<20 {
		t.Errorf("receivers: %v", recv)
	}
	exp := doc["exporters"].(map[string]any)["otlp_http/backend"].(map[string]any)
	q := exp["sending_queue"].(map[string]any)
	if exp["endpoint"] != "http://127.0.0.1:9" || q["block_on_overflow"] != true || q["queue_size"] != 256 || q["storage"] != nil {
		t.Errorf("exporter: %v", exp)
	}
	var keys []string
	for k := range exp {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if got := strings.Join(keys, ","); got != "compression,compression_params,endpoint,headers,retry_on_failure,sending_queue,timeout" {
		t.Errorf("exporter keys %s", got)
	}
	if r := exp["retry_on_failure"].(map[string]any); len(r) != 2 || r["max_elapsed_time"] != "30s" {
		t.Errorf("retry_on_failure %v", r)
	}
	if h := exp["headers"].(map[string]any); len(h) != 1 || h["Authorization"] != "Bearer ${env:SITE_TOKEN}" {
		t.Errorf("headers %v", h)
	}
	if strings.Contains(string(y), "MY_TOKEN") || strings.Contains(string(y), "example.com") || strings.Contains(string(y), "HOME") {
		t.Errorf("something of the job's file reached the configuration:\n%s", y)
	}
	auth := doc["processors"].(map[string]any)["resource/backend_auth"].(map[string]any)["attributes"].([]any)[0].(map[string]any)
	if auth["value"] != "Bearer ${env:SITE_TOKEN}" {
		t.Errorf("backend_auth %v", auth)
	}
	pipes := doc["service"].(map[string]any)["pipelines"].(map[string]any)
	tp := pipes["traces"].(map[string]any)
	if len(tp["receivers"].([]any)) != 2 || tp["processors"].([]any)[0] != "resource/backend_auth" || pipes["metrics"] != nil || pipes["logs"] == nil {
		t.Errorf("pipelines: %v", pipes)
	}
	if _, err := Config([]File{{Path: "/r/a[1]/traces.jsonl", Signal: "traces"}}, b, "http://x", "T", 1); err == nil || !strings.Contains(err.Error(), "pattern") {
		t.Errorf("a path with glob characters: %v", err)
	}
	if _, err := Config(nil, b, "http://x", "T", 1); err == nil {
		t.Error("no files: no error")
	}
	if _, err := Config(files, b, "http://x", "A}B", 1); err == nil || !strings.Contains(err.Error(), "--token-env") {
		t.Errorf("a bad variable name: %v", err)
	}
}

func TestReadBackendErrors(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "collector.yaml")
	for body, want := range map[string]string{
		"exporters: {}\n": "no exporter otlp_http/backend",
		"{":               "collector.yaml",
	} {
		write(t, p, body)
		if _, err := ReadBackend(p); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%q: %v, want %q and the path", body, err, want)
		}
	}
}

const siteFile = "otel:\n  endpoint: https://site.example.com/otlp/\n  token_env: SITE_TOKEN\n"

// The endpoint and the token's variable come from the site file or the
// flags, never from the job's collector.yaml. Without the token variable
// Run stops before starting anything, naming it.
func TestRunNeedsToken(t *testing.T) {
	job := t.TempDir()
	write(t, filepath.Join(job, "otel", "collector.yaml"), jobConfig)
	write(t, filepath.Join(job, "otel", "traces.jsonl"), traceLine+"\n")
	site := filepath.Join(t.TempDir(), "site.yaml")
	write(t, site, siteFile)
	none := func(string) (string, bool) { return "", false }
	_, err := Run(t.Context(), Options{Dir: job, Site: site, LookupEnv: none, Binary: "/nonexistent"})
	if err == nil || !strings.Contains(err.Error(), "SITE_TOKEN is not set") {
		t.Errorf("err %v, want one naming SITE_TOKEN", err)
	}
	_, err = Run(t.Context(), Options{Dir: job, Site: site, TokenEnv: "OTHER", LookupEnv: none, Binary: "/nonexistent"})
	if err == nil || !strings.Contains(err.Error(), "OTHER is not set") {
		t.Errorf("err %v, want one naming OTHER", err)
	}
	_, err = Run(t.Context(), Options{Dir: job, LookupEnv: none, Binary: "/nonexistent"})
	if err == nil || !strings.Contains(err.Error(), "--site") {
		t.Errorf("no site file: %v", err)
	}
	_, err = Run(t.Context(), Options{Dir: job, Endpoint: "ftp://x", TokenEnv: "T", LookupEnv: none, Binary: "/nonexistent"})
	if err == nil || !strings.Contains(err.Error(), `--endpoint "ftp://x"`) {
		t.Errorf("a bad endpoint: %v", err)
	}
}

// A directory of another uid is refused, naming its owner and both flags,
// unless both are given; the site file does not make it acceptable.
func TestRunRefusesAForeignDir(t *testing.T) {
	job := t.TempDir()
	write(t, filepath.Join(job, "otel", "collector.yaml"), jobConfig)
	write(t, filepath.Join(job, "otel", "traces.jsonl"), traceLine+"\n")
	site := filepath.Join(t.TempDir(), "site.yaml")
	write(t, site, siteFile)
	other := os.Getuid() + 4242
	tok := func(string) (string, bool) { return "tok", true }
	for _, opt := range []Options{
		{Dir: job, Site: site},
		{Dir: job, Site: site, Endpoint: "http://127.0.0.1:9"},
		{Dir: job, Site: site, TokenEnv: "SITE_TOKEN"},
	} {
		opt.Uid, opt.LookupEnv, opt.Binary = other, tok, "/nonexistent"
		_, err := Run(t.Context(), opt)
		var fe *ForeignError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), fmt.Sprintf("uid %d", os.Getuid())) ||
			!strings.Contains(err.Error(), "--endpoint URL and --token-env NAME") || !strings.Contains(err.Error(), "not by you") {
			t.Errorf("%+v: %v", opt, err)
		}
	}
	_, err := Run(t.Context(), Options{Dir: job, Uid: other, Endpoint: "http://127.0.0.1:9", TokenEnv: "MINE", LookupEnv: tok, Binary: "/nonexistent"})
	if err == nil || !strings.Contains(err.Error(), "--binary") {
		t.Errorf("both flags: %v, want the replay to go on to the collector", err)
	}
}

// A collector still running is warned about before anything is sent.
func TestRunWarnsOfARunningCollector(t *testing.T) {
	job := t.TempDir()
	write(t, filepath.Join(job, "otel", "collector.yaml"), jobConfig)
	write(t, filepath.Join(job, "otel", "state.json"), `{"status":"ready"}`)
	write(t, filepath.Join(job, "otel", "traces.jsonl"), traceLine+"\n")
	var out strings.Builder
	_, err := Run(t.Context(), Options{Dir: job, Out: &out, Binary: "/nonexistent/otelcol", Endpoint: "http://127.0.0.1:9", TokenEnv: "T",
		LookupEnv: func(string) (string, bool) { return "tok", true }})
	if !strings.Contains(out.String(), "is ready (state.json)") {
		t.Errorf("no warning: %q", out.String())
	}
	if err == nil || !strings.Contains(err.Error(), "--binary") {
		t.Errorf("a missing collector: %v", err)
	}
}

// A relative dir: its files are inside it (none is skipped as outside).
func TestRunRelativeDir(t *testing.T) {
	job := t.TempDir()
	write(t, filepath.Join(job, "otel", "collector.yaml"), jobConfig)
	write(t, filepath.Join(job, "otel", "traces.jsonl"), traceLine+"\n")
	t.Chdir(filepath.Dir(job))
	var out strings.Builder
	_, err := Run(t.Context(), Options{Dir: filepath.Base(job), Out: &out, Binary: "/nonexistent/otelcol", Endpoint: "http://127.0.0.1:9", TokenEnv: "T",
		LookupEnv: func(string) (string, bool) { return "tok", true }})
	if err == nil || !strings.Contains(err.Error(), "--binary") || strings.Contains(out.String(), "outside") {
		t.Errorf("err %v, output %q", err, out.String())
	}
}

// ScanAppended takes only the lines each node's receipt lists as appended
// after its collector's exit, copied whole; a dir without a receipt adds
// nothing; a listed range that is not one whole line of its file, or a
// file behind a symbolic link, is an error.
func TestScanAppended(t *testing.T) {
	dir := t.TempDir()
	otel := filepath.Join(dir, "otel")
	drain := `{"resourceSpans":[{"resource":{},"scopeSpans":[{"spans":[{"name":"slurm.drain"},{"name":"slurm.epilog"}]}]}]}` + "\n"
	body := traceLine + "\n" + traceLine + "\n" + drain
	write(t, filepath.Join(otel, "traces.jsonl"), body)
	write(t, filepath.Join(otel, "nodes", "n2", "traces.jsonl"), traceLine+"\n")
	delivered := false
	rec := func(dir string, off, n int64) {
		r := &receipt.Receipt{JobID: "1", Node: "n1", Basis: receipt.BasisFinal, Signals: map[string]receipt.Counts{},
			Appended: []receipt.Appended{{File: "traces.jsonl", Offset: off, Length: n, Spans: 2, Delivered: delivered}}}
		if err := r.Write(dir); err != nil {
			t.Fatal(err)
		}
	}
	off := int64(len(body) - len(drain))
	rec(otel, off, int64(len(drain)))
	dirs, _, err := Dirs(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	files, skipped, err := ScanAppended(dirs, t.TempDir(), false, &out)
	if err != nil || skipped != 0 {
		t.Fatal(skipped, err)
	}
	if len(files) != 1 || files[0].Items != 2 || files[0].Lines != 1 || files[0].Signal != "traces" ||
		files[0].Source != filepath.Join(otel, "traces.jsonl") {
		t.Fatalf("files %+v", files)
	}
	if b, _ := os.ReadFile(files[0].Path); string(b) != drain {
		t.Errorf("copied %q", b)
	}
	if !strings.Contains(out.String(), "n2 has no receipt") {
		t.Errorf("out %q", out.String())
	}
	for _, c := range []struct{ off, n int64 }{{off + 1, int64(len(drain)) - 1}, {off, int64(len(drain)) - 1}, {0, int64(len(body))}, {off, 1 << 30}, {off, int64(len(drain)) + 1}} {
		rec(otel, c.off, c.n)
		if _, _, err := ScanAppended(dirs, t.TempDir(), false, io.Discard); err == nil {
			t.Errorf("offset %d length %d: taken", c.off, c.n)
		}
	}
	// A line the supervisor delivered at the drain is skipped, unless forced.
	delivered = true
	rec(otel, off, int64(len(drain)))
	if files, skipped, err := ScanAppended(dirs, t.TempDir(), false, io.Discard); err != nil || skipped != 1 || len(files) != 0 {
		t.Errorf("delivered line: files %+v skipped %d err %v", files, skipped, err)
	}
	if files, skipped, err := ScanAppended(dirs, t.TempDir(), true, io.Discard); err != nil || skipped != 0 || len(files) != 1 || files[0].Items != 2 {
		t.Errorf("delivered line, forced: files %+v skipped %d err %v", files, skipped, err)
	}
	delivered = false
	rec(otel, off, int64(len(drain)))
	real := filepath.Join(dir, "elsewhere.jsonl")
	write(t, real, body)
	os.Remove(filepath.Join(otel, "traces.jsonl"))
	if err := os.Symlink(real, filepath.Join(otel, "traces.jsonl")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ScanAppended(dirs, t.TempDir(), false, io.Discard); err == nil {
		t.Error("a file behind a symbolic link taken")
	}
}

// A replay from the checkpoints refuses while another process (the
// node's supervisor, its job still running) holds a node dir's delivery
// lock, naming the node and the flag; --while-delivering sends alongside
// it with a warning; once the lock is released a replay sends what lies
// past the checkpoint, holding the lock while it does.
func TestRunRefusesWhileDelivering(t *testing.T) {
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("{}"))
	}))
	defer srv.Close()
	job := t.TempDir()
	otel := filepath.Join(job, "otel")
	node := filepath.Join(otel, "nodes", "gn2")
	for _, d := range []string{otel, node} {
		write(t, filepath.Join(d, "collector.yaml"), jobConfig)
		write(t, filepath.Join(d, delivery.CheckpointFile), `{"version":1,"files":{}}`)
		write(t, filepath.Join(d, "traces.jsonl"), traceLine+"\n")
	}
	opt := Options{Dir: job, Endpoint: srv.URL, TokenEnv: "T", LookupEnv: func(string) (string, bool) { return "tok", true }}

	release, err := delivery.Lock(node)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	opt.Out = &out
	_, err = Run(t.Context(), opt)
	if err == nil || !strings.Contains(err.Error(), "node gn2") || !strings.Contains(err.Error(), "--while-delivering") || got.Load() != 0 {
		t.Fatalf("a replay while the supervisor of gn2 delivers: %v (%d requests), want a refusal naming node gn2 and --while-delivering", err, got.Load())
	}
	t.Logf("refused: %v", err)

	out.Reset()
	opt.WhileDelivering = true
	res, err := Run(t.Context(), opt)
	if err != nil || res.Checkpointed == nil || res.Checkpointed.Accepted != 6 || !strings.Contains(out.String(), "--while-delivering: "+node+" (node gn2)") {
		t.Fatalf("--while-delivering: %v, %+v, output %q: want both dirs sent (6 spans) with a warning", err, res, out.String())
	}
	release()

	// The lock released: nothing left to send, and the replay took the
	// locks (a second one could not while it ran: it holds them only
	// while it runs, so they are free again now).
	out.Reset()
	opt.WhileDelivering = false
	res, err = Run(t.Context(), opt)
	if err != nil || res.Checkpointed == nil || res.Checkpointed.Planned != 0 {
		t.Fatalf("a replay after the job: %v, %+v", err, res)
	}
	for _, d := range []string{otel, node} {
		r, err := delivery.Lock(d)
		if err != nil {
			t.Errorf("the replay left %s locked: %v", d, err)
			continue
		}
		r()
	}
}
