package replay

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
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
	dirs, err := Dirs(job)
	if err != nil {
		t.Fatal(err)
	}
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
	if _, err := Dirs(filepath.Join(job, "nope")); err == nil {
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
    timeout: 5s
    sending_queue:
      enabled: true
      queue_size: 256
processors:
  resource/backend_auth:
    attributes:
      - key: Authorization
        value: Bearer ${env:MY_TOKEN}
        action: upsert
`

// The replay configuration keeps the job's exporter (token a reference),
// its backend_auth processor, one receiver per file, and a queue that
// blocks instead of dropping; --endpoint replaces every endpoint.
func TestConfig(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "collector.yaml"), jobConfig)
	b, err := ReadBackend(filepath.Join(dir, "collector.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if b.TokenEnv != "MY_TOKEN" || b.Auth == nil {
		t.Fatalf("backend %+v", b)
	}
	files := []File{{Path: "/r/otel/traces.jsonl", Signal: "traces", MaxLine: 10}, {Path: "/r/otel/nodes/b/traces.jsonl", Signal: "traces"}, {Path: "/r/otel/logs.jsonl", Signal: "logs"}}
	y, err := Config(files, b, "http://127.0.0.1:9/", 4242)
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
	if exp["endpoint"] != "http://127.0.0.1:9/" || exp["traces_endpoint"] != nil || q["block_on_overflow"] != true || q["queue_size"] != 256 {
		t.Errorf("exporter: %v", exp)
	}
	if h := exp["headers"].(map[string]any)["Authorization"]; h != "Bearer ${env:MY_TOKEN}" {
		t.Errorf("Authorization %v", h)
	}
	pipes := doc["service"].(map[string]any)["pipelines"].(map[string]any)
	tp := pipes["traces"].(map[string]any)
	if len(tp["receivers"].([]any)) != 2 || tp["processors"].([]any)[0] != "resource/backend_auth" || pipes["metrics"] != nil || pipes["logs"] == nil {
		t.Errorf("pipelines: %v", pipes)
	}
	// The job's endpoints stay without --endpoint.
	y, _ = Config(files[:1], b, "", 4242)
	if !strings.Contains(string(y), "traces_endpoint: https://otlp.example.com/api/otlp/v1/traces") {
		t.Errorf("without --endpoint the job's traces_endpoint is gone:\n%s", y)
	}
	if _, err := Config([]File{{Path: "/r/a[1]/traces.jsonl", Signal: "traces"}}, b, "", 1); err == nil || !strings.Contains(err.Error(), "pattern") {
		t.Errorf("a path with glob characters: %v", err)
	}
	if _, err := Config(nil, b, "", 1); err == nil {
		t.Error("no files: no error")
	}
}

func TestReadBackendErrors(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "collector.yaml")
	for body, want := range map[string]string{
		"exporters: {}\n": "no exporter otlp_http/backend",
		"exporters:\n  otlp_http/backend:\n    headers:\n      Authorization: Bearer secret\n": `"Bearer ${env:NAME}"`,
		"{": "collector.yaml",
	} {
		write(t, p, body)
		if _, err := ReadBackend(p); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%q: %v, want %q and the path", body, err, want)
		}
	}
}

// Without the token variable Run stops before starting anything, naming it.
func TestRunNeedsToken(t *testing.T) {
	job := t.TempDir()
	write(t, filepath.Join(job, "otel", "collector.yaml"), jobConfig)
	write(t, filepath.Join(job, "otel", "traces.jsonl"), traceLine+"\n")
	_, err := Run(t.Context(), Options{Dir: job, LookupEnv: func(string) (string, bool) { return "", false }, Binary: "/nonexistent"})
	if err == nil || !strings.Contains(err.Error(), "MY_TOKEN is not set") {
		t.Errorf("err %v, want one naming MY_TOKEN", err)
	}
	_, err = Run(t.Context(), Options{Dir: job, TokenEnv: "OTHER", LookupEnv: func(string) (string, bool) { return "", false }, Binary: "/nonexistent"})
	if err == nil || !strings.Contains(err.Error(), "OTHER is not set") {
		t.Errorf("err %v, want one naming OTHER", err)
	}
}

// A collector still running is warned about before anything is sent.
func TestRunWarnsOfARunningCollector(t *testing.T) {
	job := t.TempDir()
	write(t, filepath.Join(job, "otel", "collector.yaml"), jobConfig)
	write(t, filepath.Join(job, "otel", "state.json"), `{"status":"ready"}`)
	write(t, filepath.Join(job, "otel", "traces.jsonl"), traceLine+"\n")
	var out strings.Builder
	_, err := Run(t.Context(), Options{Dir: job, Out: &out, Binary: "/nonexistent/otelcol",
		LookupEnv: func(string) (string, bool) { return "tok", true }})
	if !strings.Contains(out.String(), "is ready (state.json)") {
		t.Errorf("no warning: %q", out.String())
	}
	if err == nil || !strings.Contains(err.Error(), "--binary") {
		t.Errorf("a missing collector: %v", err)
	}
}
