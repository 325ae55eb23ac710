package render

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// Component ids of the rendered configuration that other code names: the
// supervisor reads the collector's own counters by them, replay renders
// its own configuration with the same ids, and collector.log names them.
const (
	// BackendExporter is the exporter to the site's OTLP/HTTP backend.
	BackendExporter = "otlp_http/backend"
	// BackendAuth is the processor that also puts the backend token on
	// every resource (otel.token_resource_attribute) on the way to the
	// backend.
	BackendAuth = "resource/backend_auth"
	// ReceiverAuth is the OTLP receivers' bearer-token authenticator
	// (the token in ReceiverTokenEnv).
	ReceiverAuth = "bearertokenauth/receivers"
	// IdentityProcessor is the processor that stamps the run's identity on
	// every resource (identityActions), in every pipeline.
	IdentityProcessor = "resource/identity"
	// PluginReceiver is the OTLP/HTTP receiver of the supervisor's own
	// telling (the Slurm phase spans and the node's readings,
	// Ports.Plugin), behind PluginAuth.
	PluginReceiver = "otlp/plugin"
	// PluginAuth is PluginReceiver's bearer-token authenticator (the token
	// in PluginTokenEnv, which the job's tasks are not given).
	PluginAuth = "bearertokenauth/plugin"
	// SourceProcessor stamps contract.SourceKey=contract.SourceSlurm on
	// every resource of the plugin's pipelines (PluginPipelines).
	SourceProcessor = "resource/source"
	// UnsourceProcessor deletes contract.SourceKey from every resource of
	// the job's pipelines: a task cannot mark what it sends as Slurm's.
	UnsourceProcessor = "resource/unsource"
)

// PluginPipeline is the id of the plugin's own pipeline of signal
// ("traces" or "metrics"): "<signal>/plugin".
func PluginPipeline(signal string) string { return signal + "/plugin" }

// FileExporter is the id of the file exporter of signal ("traces",
// "metrics", "logs"): "file/<signal>", writing <output dir>/<signal>.jsonl.
func FileExporter(signal string) string { return "file/" + signal }

// EnvRef is the configuration's reference to the environment variable
// name: "${env:<name>}". Secrets are only ever such references.
func EnvRef(name string) string { return "${env:" + name + "}" }

// Bearer is the value of an Authorization header whose token is in the
// environment variable name: "Bearer ${env:<name>}".
func Bearer(name string) string { return "Bearer " + EnvRef(name) }

// Escape doubles every "$" of s, for the collector's expansion, which
// turns "$$" back into "$": a literal in the configuration (user text
// reaches the collector unchanged), and the value of a variable referenced
// inside a larger string (Bearer), which the collector expands once more
// (a token holding "${env:HOME}" or "$$" then arrives byte for byte).
func Escape(s string) string { return strings.ReplaceAll(s, "$", "$$") }

// Unescape undoes Escape: the value as the collector sees it.
func Unescape(s string) string { return strings.ReplaceAll(s, "$$", "$") }

// ConfigIdentity reads back the run's identity a rendered configuration y
// stamps: resource/identity's actions (IdentityProcessor), each attribute
// key with its value as text (an Int in decimal; a copy from another
// attribute as "from:<that key>"). Errors: y is not YAML, or holds no
// such processor.
func ConfigIdentity(y []byte) (map[string]string, error) {
	var c struct {
		Processors map[string]struct {
			Attributes []struct {
				Key           string `yaml:"key"`
				Value         any    `yaml:"value"`
				FromAttribute string `yaml:"from_attribute"`
			} `yaml:"attributes"`
		} `yaml:"processors"`
	}
	if err := yaml.Unmarshal(y, &c); err != nil {
		return nil, err
	}
	p, ok := c.Processors[IdentityProcessor]
	if !ok {
		return nil, fmt.Errorf("no %s processor", IdentityProcessor)
	}
	out := map[string]string{}
	for _, a := range p.Attributes {
		if a.FromAttribute != "" {
			out[a.Key] = "from:" + a.FromAttribute
			continue
		}
		out[a.Key] = fmt.Sprint(a.Value)
	}
	return out, nil
}
