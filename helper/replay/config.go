package replay

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// backendExporter and backendAuth are the rendered job configuration's
// exporter to the site and its optional token-as-resource-attribute
// processor (helper/render).
const (
	backendExporter = "otlp_http/backend"
	backendAuth     = "resource/backend_auth"
	fileReceiver    = "otlp_json_file"
)

// Backend is how a job's collector reached the site's backend, read from
// its collector.yaml.
type Backend struct {
	// Exporter is the otlp_http/backend block, as rendered.
	Exporter map[string]any
	// Auth is the resource/backend_auth processor block, or nil.
	Auth map[string]any
	// TokenEnv is the variable the exporter's bearer token comes from
	// (otel.token_env at submit).
	TokenEnv string
}

var tokenRefRE = regexp.MustCompile(`^Bearer \$\{env:([A-Za-z_][A-Za-z0-9_]*)\}$`)

// ReadBackend reads the backend settings of a job's collector.yaml.
// Errors name the file and what is missing.
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
	exp := doc.Exporters[backendExporter]
	if exp == nil {
		return nil, fmt.Errorf("%s: no exporter %s", path, backendExporter)
	}
	b := &Backend{Exporter: exp, Auth: doc.Processors[backendAuth]}
	if h, ok := exp["headers"].(map[string]any); ok {
		if v, ok := h["Authorization"].(string); ok {
			if m := tokenRefRE.FindStringSubmatch(v); m != nil {
				b.TokenEnv = m[1]
			}
		}
	}
	if b.TokenEnv == "" {
		return nil, fmt.Errorf("%s: exporter %s has no Authorization header of the form \"Bearer ${env:NAME}\"", path, backendExporter)
	}
	return b, nil
}

// globChars are the characters the file receiver's include patterns treat
// as a pattern.
const globChars = "*?[]{}\\"

// Config is the replay collector's configuration: one otlp_json_file
// receiver per file (otlp_json_file/<index in files>, so each file's
// progress shows in the receiver's own counters and no two files are taken
// for one by their first bytes), the job's backend exporter (endpoint
// replaced by endpoint unless ""; its sending queue blocks when full
// instead of dropping), its resource/backend_auth when it had one, and the
// collector's own metrics on 127.0.0.1:telemetryPort. The token stays a
// ${env:<TokenEnv>} reference.
func Config(files []File, b *Backend, endpoint string, telemetryPort int) ([]byte, error) {
	receivers := map[string]any{}
	bySig := map[string][]string{}
	for i, f := range files {
		if strings.ContainsAny(f.Path, globChars) {
			return nil, fmt.Errorf("%s: the path holds one of %s, which the file receiver reads as a pattern; copy the files to a plain path and replay that", f.Path, globChars)
		}
		id := fmt.Sprintf("%s/%d", fileReceiver, i)
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
	exp := map[string]any{}
	for k, v := range b.Exporter {
		exp[k] = v
	}
	if endpoint != "" {
		exp["endpoint"] = endpoint
		for _, k := range []string{"traces_endpoint", "metrics_endpoint", "logs_endpoint"} {
			delete(exp, k)
		}
	}
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
	if b.Auth != nil {
		processors[backendAuth] = b.Auth
		procs = []string{backendAuth}
	}
	pipelines := map[string]any{}
	for _, sig := range Signals {
		if ids := bySig[sig]; len(ids) > 0 {
			p := map[string]any{"receivers": ids, "exporters": []string{backendExporter}}
			if len(procs) > 0 {
				p["processors"] = procs
			}
			pipelines[sig] = p
		}
	}
	doc := map[string]any{
		"receivers": receivers,
		"exporters": map[string]any{backendExporter: exp},
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
