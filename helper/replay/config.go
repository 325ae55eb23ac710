package replay

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
)

// fileReceiver is the type of the receivers that read the jsonl files.
const fileReceiver = "otlp_json_file"

// fileReceiverID is the id of the receiver of files[i]:
// "otlp_json_file/<i>".
func fileReceiverID(i int) string { return fmt.Sprintf("%s/%d", fileReceiver, i) }

// Backend is what replay takes from a job's collector.yaml: only settings
// of the exporter that the plugin itself renders and that cannot send
// anything anywhere else. The endpoint, the headers and the token variable
// never come from the file (see Options).
type Backend struct {
	// Exporter holds the copied keys of the otlp_http/backend block:
	// timeout, compression, compression_params.level,
	// retry_on_failure.{enabled, initial_interval, max_interval,
	// max_elapsed_time} and sending_queue.{enabled, queue_size}, each only
	// when its value has the rendered type (durations as Go duration
	// strings, sizes as integers). Everything else in the block is dropped.
	Exporter map[string]any
	// Auth reports whether the job had the resource/backend_auth processor
	// (otel.token_resource_attribute): replay renders its own, naming its
	// own token variable.
	Auth bool
}

// Bounds are the exporter's timeout of one request and how long it
// retries a batch (retry_on_failure.max_elapsed_time; 0 when retries are
// off), from Exporter; 0 where the job's collector.yaml did not say.
func (b *Backend) Bounds() (request, retries time.Duration) {
	request, _ = time.ParseDuration(fmt.Sprint(b.Exporter["timeout"]))
	if r, ok := b.Exporter["retry_on_failure"].(map[string]any); ok && r["enabled"] != false {
		retries, _ = time.ParseDuration(fmt.Sprint(r["max_elapsed_time"]))
	}
	return max(request, 0), max(retries, 0)
}

// tokenEnvRE is a variable name replay accepts for the token.
var tokenEnvRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })

var compressions = map[string]bool{"": true, "none": true, "gzip": true, "zstd": true, "snappy": true, "zlib": true, "deflate": true, "x-snappy-framed": true, "lz4": true}

// ReadBackend reads the copied backend settings of a job's collector.yaml
// (see Backend). Errors name the file: unreadable, not YAML, or without the
// otlp_http/backend exporter.
func ReadBackend(path string) (*Backend, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Exporters  map[string]map[string]any `yaml:"exporters"`
		Processors map[string]map[string]any `yaml:"processors"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	exp := doc.Exporters[render.BackendExporter]
	if exp == nil && doc.Exporters[render.FileExporter("traces")] != nil {
		// otel.delivery: files: the job's collector had no backend
		// exporter (its supervisor sent the files); replay's collector
		// sends with the exporter's defaults.
		return &Backend{Exporter: map[string]any{}}, nil
	}
	if exp == nil {
		return nil, fmt.Errorf("%s: no exporter %s", path, render.BackendExporter)
	}
	_, auth := doc.Processors[render.BackendAuth]
	return &Backend{Exporter: copyRendered(exp), Auth: auth}, nil
}

// copyRendered keeps the rendered keys of an otlp_http/backend block whose
// values have the rendered types.
func copyRendered(exp map[string]any) map[string]any {
	isDur := func(v any) bool {
		s, ok := v.(string)
		if !ok {
			return false
		}
		_, err := time.ParseDuration(s)
		return err == nil
	}
	isInt := func(v any) bool { _, ok := v.(int); return ok }
	isBool := func(v any) bool { _, ok := v.(bool); return ok }
	out := map[string]any{}
	if isDur(exp["timeout"]) {
		out["timeout"] = exp["timeout"]
	}
	if c, ok := exp["compression"].(string); ok && compressions[c] {
		out["compression"] = c
	}
	sub := func(key string, keep map[string]func(any) bool) {
		m, ok := exp[key].(map[string]any)
		if !ok {
			return
		}
		n := map[string]any{}
		for k, check := range keep {
			if v, ok := m[k]; ok && check(v) {
				n[k] = v
			}
		}
		if len(n) > 0 {
			out[key] = n
		}
	}
	sub("compression_params", map[string]func(any) bool{"level": isInt})
	sub("retry_on_failure", map[string]func(any) bool{"enabled": isBool, "initial_interval": isDur, "max_interval": isDur, "max_elapsed_time": isDur})
	sub("sending_queue", map[string]func(any) bool{"enabled": isBool, "queue_size": isInt})
	return out
}

// globChars are the characters the file receiver's include patterns treat
// as a pattern.
const globChars = "*?[]{}\\"

// Config is the replay collector's configuration: one otlp_json_file
// receiver per file (otlp_json_file/<index in files>, so each file's
// progress shows in the receiver's own counters and no two files are taken
// for one by their first bytes), an otlp_http/backend exporter to endpoint
// with "Authorization: Bearer ${env:<tokenEnv>}" and the copied settings of
// b (its sending queue blocks when full instead of dropping), a
// resource/backend_auth processor naming tokenEnv when b.Auth, and the
// collector's own metrics on 127.0.0.1:telemetryPort. Errors: no files, a
// path with glob characters, an empty endpoint or a bad token variable.
func Config(files []File, b *Backend, endpoint, tokenEnv string, telemetryPort int) ([]byte, error) {
	if endpoint == "" {
		return nil, errors.New("--endpoint: no endpoint")
	}
	if !tokenEnvRE().MatchString(tokenEnv) {
		return nil, fmt.Errorf("--token-env %q: not a variable name (letters, digits, _)", tokenEnv)
	}
	receivers := map[string]any{}
	bySig := map[string][]string{}
	for i, f := range files {
		if strings.ContainsAny(f.Path, globChars) {
			return nil, fmt.Errorf("%s: the path holds one of %s, which the file receiver reads as a pattern; copy the files to a plain path and replay that", f.Path, globChars)
		}
		id := fileReceiverID(i)
		receivers[id] = map[string]any{
			"include":           []string{f.Path},
			"start_at":          "beginning",
			"include_file_name": false,
			"max_log_size":      f.MaxLine + 1<<20,
			"poll_interval":     "200ms",
		}
		bySig[f.Signal] = append(bySig[f.Signal], id)
	}
	if len(receivers) == 0 {
		return nil, errors.New("no jsonl file with data to replay")
	}
	bearer := render.Bearer(tokenEnv)
	exp := map[string]any{}
	for k, v := range b.Exporter {
		exp[k] = v
	}
	exp["endpoint"] = endpoint
	exp["headers"] = map[string]any{"Authorization": bearer}
	q, _ := exp["sending_queue"].(map[string]any)
	nq := map[string]any{"enabled": true, "block_on_overflow": true}
	for k, v := range q {
		if k != "enabled" && k != "block_on_overflow" {
			nq[k] = v
		}
	}
	exp["sending_queue"] = nq
	var procs []string
	processors := map[string]any{}
	if b.Auth {
		processors[render.BackendAuth] = map[string]any{"attributes": []any{map[string]any{
			"key": "Authorization", "value": bearer, "action": "upsert",
		}}}
		procs = []string{render.BackendAuth}
	}
	pipelines := map[string]any{}
	for _, sig := range Signals {
		if ids := bySig[sig]; len(ids) > 0 {
			p := map[string]any{"receivers": ids, "exporters": []string{render.BackendExporter}}
			if len(procs) > 0 {
				p["processors"] = procs
			}
			pipelines[sig] = p
		}
	}
	doc := map[string]any{
		"receivers": receivers,
		"exporters": map[string]any{render.BackendExporter: exp},
		"service": map[string]any{
			"telemetry": map[string]any{
				"logs": map[string]any{"level": "info"},
				"metrics": map[string]any{"level": "normal", "readers": []any{
					map[string]any{"pull": map[string]any{"exporter": map[string]any{"prometheus": map[string]any{
						"host": "127.0.0.1", "port": telemetryPort,
					}}}},
				}},
			},
			"pipelines": pipelines,
		},
	}
	if len(processors) > 0 {
		doc["processors"] = processors
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return append([]byte("# Collector configuration of `gym-otel-spank replay`.\n"), out...), nil
}
