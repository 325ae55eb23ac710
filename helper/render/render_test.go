package render_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// variant is one row of the golden matrix.
type variant struct {
	name string
	spec string            // SPEC items over testdata/site.yaml
	job  func(*render.Job) // changes to the first run's job facts, or nil
}

// scrapeOnShutdown names the variant rendered as the first collector run
// of a plugin-started supervisor (Input.ScrapeOnShutdown), which the final
// scrape at the batch script's end stops.
const scrapeOnShutdown = "scrape-on-shutdown"

// firstScrapeAt asks, for the variants named, for the targets' first
// scrapes at that instant (render.FirstScrape, host gn1.example.org).
var firstScrapeAt = map[string]time.Time{"first-scrape": time.Unix(1700000000, 123456789)}

var variants = []variant{
	{"no-model-service", "", nil},
	{"two-services", "config=testdata/gym-two-services.yaml,benchmark=gsm8k", nil},
	{"node-ports-null", "gpu_metrics_port=null,node_metrics_port=null", nil},
	{"logs-off", "gym_logs=false,gym_telemetry=false", nil},
	{"endpoint-path-prefix", "endpoint=https://otlp.example.com/api/otlp/v1/traces", nil},
	// The collector's own exporter sends to the backend (otel.delivery:
	// collector), alone and with the token as a resource attribute on the
	// backend's pipelines.
	{"delivery-collector", "delivery=collector", nil},
	{"collector-token-resource-attribute", "delivery=collector,token_resource_attribute=true", nil},
	// The supervisor delivers the files (helper/delivery, the default):
	// no backend exporter, and the token attribute is the supervisor's to
	// add (no resource/backend_auth).
	{"delivery-files", "delivery=files,delivery_rate_cap=5000,token_resource_attribute=true", nil},
	// Remote export off: no backend exporter, no token anywhere (the
	// site's token_resource_attribute is moot).
	{"delivery-none", "delivery=none,token_resource_attribute=true", nil},
	{"scrape-limits", "scrape_sample_limit=1000,scrape_body_size_limit_mib=2,scrape_label_limit=20,scrape_label_name_length_limit=100,scrape_label_value_length_limit=500", nil},
	{"hostile-text", `benchmark=a$b"c:d {x},model=m${env:HOME}\\n,component=c$`, nil},
	// The third run of job 1234 on Slurm 25.11+ (two requeues, a SLUID).
	{"requeued-sluid", "", func(j *render.Job) { j.RestartCount, j.SLUID = "2", "sEKNKTV3WPV500" }},
	// Every scrape job with the gym_otel_phase its first scrape at that
	// instant needs (phase.go).
	{"first-scrape", "config=testdata/gym-two-services.yaml", nil},
	// The GPUs as the prolog sees them (gpus.go): none named; whole GPUs
	// by UUID (Slurm 25.11+); MIG devices by MIG UUID (drivers 470.42.01+:
	// the instances cannot be told apart); MIG devices by parent UUID and
	// instance ids (older drivers: exact).
	{"gpus-unnamed", "", func(j *render.Job) { j.GPUs = nil }},
	{"gpu-uuids", "", func(j *render.Job) {
		j.GPUDevices = []string{"GPU-5fd4c1a0-0000-4000-8000-000000000000", "GPU-5fd4c1a0-0000-4000-8000-000000000001"}
	}},
	{"mig-uuids", "", func(j *render.Job) {
		j.GPUDevices = []string{"MIG-0c1d2e3f-0000-4000-8000-000000000001", "MIG-0c1d2e3f-0000-4000-8000-000000000002"}
	}},
	{"mig-instances", "", func(j *render.Job) {
		j.GPUDevices = []string{"MIG-GPU-5fd4c1a0-0000-4000-8000-000000000000/1/0", "MIG-GPU-5fd4c1a0-0000-4000-8000-000000000000/2/0"}
	}},
	// The first run, stopped at the batch script's end for the final scrape.
	{scrapeOnShutdown, "config=testdata/gym-two-services.yaml", nil},
	// The configuration the collector runs with: its files under the
	// output dir it inherited as descriptor 3 (Input.FilesAt).
	{filesAtHeld, "", nil},
}

// filesAtHeld names the variant rendered with Input.FilesAt.
const filesAtHeld = "files-at-held-dir"

func renderVariant(t *testing.T, v variant, gpus []string) []byte {
	t.Helper()
	spec := strings.ReplaceAll(v.spec, "config=testdata/", "config="+testdata(t)+"/")
	r, err := config.Resolve(config.Inputs{SiteFile: "testdata/site.yaml", Spec: spec, WorkDir: "/home/alice/runs"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Validate(nil); err != nil {
		t.Fatal(err)
	}
	job := render.Job{User: "alice", JobID: "1234", RestartCount: "0", RunID: "1234", Benchmark: r.Identity.Benchmark,
		Model: r.Identity.Model, Cluster: "eos", Node: "gn1", NodeIndex: 0, GPUs: gpus}
	if v.job != nil {
		v.job(&job)
	}
	in := render.Input{
		Resolved:         r,
		Job:              job,
		Ports:            render.Ports{OTLPGRPC: 41001, OTLPHTTP: 41002, Health: 41003, Telemetry: 41004, Final: 41005, Plugin: 41007},
		OutputDir:        "/home/alice/runs/gym-otel-1234/otel",
		ScrapeOnShutdown: v.name == scrapeOnShutdown,
	}
	if v.name == filesAtHeld {
		in.FilesAt = "/proc/self/fd/3"
	}
	if at, ok := firstScrapeAt[v.name]; ok {
		in.FirstScrape = &render.FirstScrape{At: at, Host: "gn1.example.org"}
	}
	y, err := render.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	return y
}

func testdata(t *testing.T) string {
	abs, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func TestGolden(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			got := renderVariant(t, v, []string{"0", "1"})
			path := filepath.Join("testdata", v.name+".golden.yaml")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("render differs from %s (go test -update to accept):\n%s", path, got)
			}
			again := renderVariant(t, v, []string{"0", "1"})
			if !bytes.Equal(got, again) {
				t.Error("render is not deterministic")
			}
		})
	}
}

func TestRenderShape(t *testing.T) {
	y := string(renderVariant(t, variants[0], nil))
	for _, want := range []string{"127.0.0.1:41001", "127.0.0.1:41002", "127.0.0.1:41003", "port: 41004",
		"job_name: node", "job_name: dcgm", "append: true",
		"${env:GYM_OTEL_RECEIVER_TOKEN}", "exclude_dimensions"} {
		if !strings.Contains(y, want) {
			t.Errorf("rendered config lacks %q", want)
		}
	}
	// Delivery "files" (the default): the supervisor sends the files; the
	// collector has no backend exporter and no bearer header of its own.
	for _, bad := range []string{"4317", "4318", "13133", "0.0.0.0", "filter/dcgm", "metric_relabel_configs", render.BackendExporter, "Bearer ${env:OTEL_TOKEN}"} {
		if strings.Contains(y, bad) {
			t.Errorf("rendered config holds %q", bad)
		}
	}
	for _, v := range variants {
		if v.name != "delivery-collector" {
			continue
		}
		c := string(renderVariant(t, v, nil))
		if !strings.Contains(c, "  "+render.BackendExporter+":\n") || !strings.Contains(c, "Authorization: Bearer ${env:OTEL_TOKEN}") {
			t.Errorf("delivery collector: no %s with the bearer token:\n%s", render.BackendExporter, c)
		}
	}
	noScrape := string(renderVariant(t, variants[2], nil))
	// The node's readings are pushed to the plugin's own OTLP receiver.
	if strings.Contains(noScrape, "\n  prometheus:\n") || strings.Contains(noScrape, "- prometheus\n") {
		t.Error("a Prometheus receiver with nothing to scrape")
	}
	// Typed: the job id a string, the restart count an Int.
	if v, act, ok := identityAction(t, []byte(y), "slurm_job_id"); !ok || v != "1234" || act != "upsert" {
		t.Errorf("slurm_job_id: %#v %s %v", v, act, ok)
	}
	if v, act, ok := identityAction(t, []byte(y), "slurm_job_restart_count"); !ok || v != 0 || act != "upsert" {
		t.Errorf("slurm_job_restart_count: %#v %s %v", v, act, ok)
	}
	if v, act, ok := identityAction(t, []byte(y), "slurm.job.id"); !ok || v != "1234" || act != "insert" {
		t.Errorf("Lens' slurm.job.id: %#v %s %v", v, act, ok)
	}
	if strings.Contains(y, "slurm_job_sluid") {
		t.Error("a slurm_job_sluid without a SLUID")
	}
	logsOff := string(renderVariant(t, variants[3], nil))
	if strings.Contains(logsOff, "logs.jsonl") || strings.Contains(logsOff, "file/logs") {
		t.Error("logs pipeline with gym_logs off")
	}
}

// TestRunIdentity: two runs of one job id differ in their resource
// statements; an unknown or malformed restart count is not stamped.
func TestRunIdentity(t *testing.T) {
	r, err := config.Resolve(config.Inputs{SiteFile: "testdata/site.yaml", WorkDir: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	in := render.Input{Resolved: r, Ports: render.Ports{OTLPGRPC: 1, OTLPHTTP: 2, Health: 3, Telemetry: 4}, OutputDir: "/w/otel"}
	for _, c := range []struct {
		restarts, sluid string
		want, not       []string
	}{
		{"0", "", []string{"slurm_job_restart_count=0"}, []string{"slurm_job_sluid"}},
		{"1", "sAAAAAAAAAAA01", []string{"slurm_job_restart_count=1", "slurm_job_sluid=sAAAAAAAAAAA01"}, nil},
		{"", "", nil, []string{"slurm_job_restart_count", "slurm_job_sluid"}},
		{"1; drop", "", nil, []string{"slurm_job_restart_count"}},
		{"-1", "", nil, []string{"slurm_job_restart_count"}},
	} {
		in.Job = render.Job{JobID: "77", RestartCount: c.restarts, SLUID: c.sluid, RunID: "r"}
		y, err := render.Render(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range c.want {
			key, want, _ := strings.Cut(w, "=")
			if v, _, ok := identityAction(t, y, key); !ok || fmt.Sprint(v) != want {
				t.Errorf("restart count %q, SLUID %q: %s is %#v, want %s", c.restarts, c.sluid, key, v, want)
			}
		}
		for _, n := range c.not {
			if strings.Contains(string(y), n) {
				t.Errorf("restart count %q, SLUID %q: holds %s", c.restarts, c.sluid, n)
			}
		}
	}
}

func TestRenderRejects(t *testing.T) {
	r, _ := config.Resolve(config.Inputs{SiteFile: "testdata/site.yaml", WorkDir: "/w"})
	if _, err := render.Render(render.Input{Resolved: r, OutputDir: "rel"}); err == nil {
		t.Error("zero ports and a relative dir accepted")
	}
	ports := render.Ports{OTLPGRPC: 1, OTLPHTTP: 2, Health: 3}
	if _, err := render.Render(render.Input{Resolved: r, Ports: ports, OutputDir: "/w/otel", FilesAt: "fd/3"}); err == nil || !strings.Contains(err.Error(), `"fd/3"`) {
		t.Errorf("a relative FilesAt: %v", err)
	}
}

// TestCollectorValidates loads every golden variant with the real
// collector's validate command.
func TestCollectorValidates(t *testing.T) {
	bin := testenv.Collector(t)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "collector.yaml")
			if err := os.WriteFile(path, renderVariant(t, v, []string{"0"}), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "validate", "--config", path)
			cmd.Env = append(os.Environ(), "OTEL_TOKEN=t", render.ReceiverTokenEnv+"=r", render.PluginTokenEnv+"=p")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s validate: %v\n%s", bin, err, out)
			}
			// By content, as the supervisor passes it (render.ConfigEnv).
			y, _ := os.ReadFile(path)
			cmd = exec.Command(bin, "validate", "--config", "env:"+render.ConfigEnv)
			cmd.Env = append(os.Environ(), "OTEL_TOKEN=t", render.ReceiverTokenEnv+"=r", render.PluginTokenEnv+"=p", render.ConfigEnv+"="+string(y))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s validate --config env:%s: %v\n%s", bin, render.ConfigEnv, err, out)
			}
		})
	}
}

// TestNodeReadingsPipeline: with no target of the job's, the collector
// has no Prometheus receiver at all; the supervisor's readings of the
// node (producer "cgroup") enter metrics/plugin by the plugin's own OTLP
// receiver, the one of its phase spans. The real collector accepts the
// configuration.
func TestNodeReadingsPipeline(t *testing.T) {
	r, err := config.Resolve(config.Inputs{SiteFile: "testdata/site.yaml", WorkDir: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	r.Otel.GPUMetricsPort, r.Otel.NodeMetricsPort = 0, 0
	in := render.Input{Resolved: r, Job: render.Job{JobID: "77", Node: "gn1", RunID: "r"}, Ports: render.Ports{OTLPGRPC: 1, OTLPHTTP: 2, Health: 3, Telemetry: 4, Plugin: 5}, OutputDir: "/w/otel"}
	y, err := render.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	var recv struct{ Receivers map[string]any }
	if err := yaml.Unmarshal(y, &recv); err != nil {
		t.Fatal(err)
	}
	for id := range recv.Receivers {
		if id != "otlp" && id != render.PluginReceiver {
			t.Errorf("no targets: receiver %s:\n%s", id, y)
		}
	}
	if strings.Contains(string(y), "scrape_configs") {
		t.Errorf("no targets: a scrape job:\n%s", y)
	}
	var doc struct {
		Service struct {
			Pipelines map[string]struct{ Receivers, Processors []string }
		}
	}
	if err := yaml.Unmarshal(y, &doc); err != nil {
		t.Fatal(err)
	}
	mp := doc.Service.Pipelines[render.PluginPipeline("metrics")]
	if !slices.Equal(mp.Receivers, []string{render.PluginReceiver}) {
		t.Errorf("%s receivers %v, want [%s]", render.PluginPipeline("metrics"), mp.Receivers, render.PluginReceiver)
	}
	if want := []string{"memory_limiter", render.SourceProcessor, render.IdentityProcessor, "batch"}; !slices.Equal(mp.Processors, want) {
		t.Errorf("%s processors %v, want %v", render.PluginPipeline("metrics"), mp.Processors, want)
	}
	in.Ports.Plugin = 0
	without, err := render.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(without), render.PluginReceiver) || strings.Contains(string(without), render.PluginPipeline("metrics")) {
		t.Errorf("no plugin port: a plugin receiver or pipeline:\n%s", without)
	}
	path := filepath.Join(t.TempDir(), "collector.yaml")
	if err := os.WriteFile(path, y, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testenv.Collector(t), "validate", "--config", path)
	cmd.Env = append(os.Environ(), "OTEL_TOKEN=t", render.ReceiverTokenEnv+"=r", render.PluginTokenEnv+"=p")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("validate: %v\n%s", err, out)
	}
}

// identityAction is the value and action of resource/identity's action on
// key in the rendered configuration y.
func identityAction(t *testing.T, y []byte, key string) (any, string, bool) {
	t.Helper()
	var c struct {
		Processors map[string]struct {
			Attributes []struct {
				Key    string `yaml:"key"`
				Value  any    `yaml:"value"`
				Action string `yaml:"action"`
			} `yaml:"attributes"`
		} `yaml:"processors"`
	}
	if err := yaml.Unmarshal(y, &c); err != nil {
		t.Fatal(err)
	}
	for _, a := range c.Processors[render.IdentityProcessor].Attributes {
		if a.Key == key {
			return a.Value, a.Action, true
		}
	}
	return nil, "", false
}

// TestPluginPipelines: what the supervisor tells (its phase spans and its
// readings of the node, on Ports.Plugin) enters by a receiver of its own, behind
// the plugin's token, in pipelines that stamp contract.SourceKey; every
// pipeline of the job's receivers deletes that key before anything else
// sees the data; every pipeline stamps the identity; the plugin's
// pipelines share the job's file exporter, the backend exporter and
// span_metrics. The real collector accepts it, with
// token_resource_attribute too.
func TestPluginPipelines(t *testing.T) {
	for _, v := range []variant{{"plugin", "", nil}, {"collector-plugin", "delivery=collector", nil}, {"collector-token-resource-attribute-plugin", "delivery=collector,token_resource_attribute=true", nil}} {
		t.Run(v.name, func(t *testing.T) {
			y := renderVariant(t, v, nil)
			var doc struct {
				Receivers  map[string]map[string]any
				Processors map[string]struct {
					Attributes []map[string]any `yaml:"attributes"`
				}
				Extensions map[string]map[string]any
				Service    struct {
					Extensions []string
					Pipelines  map[string]struct{ Receivers, Processors, Exporters []string }
				}
			}
			if err := yaml.Unmarshal(y, &doc); err != nil {
				t.Fatal(err)
			}
			plug, ok := doc.Receivers[render.PluginReceiver]
			if !ok {
				t.Fatalf("no %s receiver:\n%s", render.PluginReceiver, y)
			}
			protos, _ := plug["protocols"].(map[string]any)
			if _, grpc := protos["grpc"]; grpc || len(protos) != 1 {
				t.Errorf("%s protocols %v, want http only", render.PluginReceiver, protos)
			}
			if h, _ := protos["http"].(map[string]any); h["endpoint"] != "127.0.0.1:41007" ||
				h["auth"].(map[string]any)["authenticator"] != render.PluginAuth {
				t.Errorf("%s http %v, want 127.0.0.1:41007 behind %s", render.PluginReceiver, h, render.PluginAuth)
			}
			if tok := doc.Extensions[render.PluginAuth]["token"]; tok != render.EnvRef(render.PluginTokenEnv) {
				t.Errorf("%s token %v, want %s", render.PluginAuth, tok, render.EnvRef(render.PluginTokenEnv))
			}
			if tok := doc.Extensions[render.ReceiverAuth]["token"]; tok == render.EnvRef(render.PluginTokenEnv) {
				t.Errorf("the job's receivers take the plugin's token")
			}
			if !slices.Contains(doc.Service.Extensions, render.PluginAuth) {
				t.Errorf("service extensions %v lack %s", doc.Service.Extensions, render.PluginAuth)
			}
			if !strings.Contains(string(y), "value: "+render.Bearer(render.PluginTokenEnv)) {
				t.Errorf("the final figures' reader is not behind the plugin's token:\n%s", y)
			}
			src := doc.Processors[render.SourceProcessor].Attributes
			if len(src) != 1 || src[0]["key"] != contract.SourceKey || src[0]["value"] != contract.SourceSlurm || src[0]["action"] != "upsert" {
				t.Errorf("%s %v, want upsert %s=%s", render.SourceProcessor, src, contract.SourceKey, contract.SourceSlurm)
			}
			unsrc := doc.Processors[render.UnsourceProcessor].Attributes
			if len(unsrc) != 1 || unsrc[0]["key"] != contract.SourceKey || unsrc[0]["action"] != "delete" {
				t.Errorf("%s %v, want delete %s", render.UnsourceProcessor, unsrc, contract.SourceKey)
			}
			plugins := 0
			for id, p := range doc.Service.Pipelines {
				if !slices.Contains(p.Processors, render.IdentityProcessor) {
					t.Errorf("pipeline %s: no %s: %v", id, render.IdentityProcessor, p.Processors)
				}
				mine := slices.Contains(p.Receivers, render.PluginReceiver)
				if mine {
					plugins++
					if len(p.Receivers) != 1 {
						t.Errorf("pipeline %s mixes the plugin's receiver with others: %v", id, p.Receivers)
					}
					if !slices.Contains(p.Processors, render.SourceProcessor) || slices.Contains(p.Processors, render.UnsourceProcessor) {
						t.Errorf("plugin pipeline %s processors %v: want %s, not %s", id, p.Processors, render.SourceProcessor, render.UnsourceProcessor)
					}
					continue
				}
				// The job's: the marker deleted before the identity,
				// never stamped.
				i, j := slices.Index(p.Processors, render.UnsourceProcessor), slices.Index(p.Processors, render.IdentityProcessor)
				if i < 0 || i > j || slices.Contains(p.Processors, render.SourceProcessor) {
					t.Errorf("job pipeline %s processors %v: want %s before %s, no %s", id, p.Processors, render.UnsourceProcessor, render.IdentityProcessor, render.SourceProcessor)
				}
			}
			want := 2
			if v.name == "collector-token-resource-attribute-plugin" {
				want = 4
			}
			if plugins != want {
				t.Errorf("%d plugin pipelines, want %d: %v", plugins, want, doc.Service.Pipelines)
			}
			tp := doc.Service.Pipelines[render.PluginPipeline("traces")]
			// The backend exporter only with delivery "collector" and
			// in the same pipeline only without the token attribute.
			wantExp := []string{"span_metrics", render.FileExporter("traces")}
			if v.name == "collector-plugin" {
				wantExp = append(wantExp, render.BackendExporter)
			}
			if !slices.Equal(tp.Exporters, wantExp) {
				t.Errorf("%s exporters %v, want %v", render.PluginPipeline("traces"), tp.Exporters, wantExp)
			}
			if mp := doc.Service.Pipelines[render.PluginPipeline("metrics")]; !slices.Contains(mp.Exporters, render.FileExporter("metrics")) {
				t.Errorf("%s exporters %v lack %s", render.PluginPipeline("metrics"), mp.Exporters, render.FileExporter("metrics"))
			}
			path := filepath.Join(t.TempDir(), "collector.yaml")
			if err := os.WriteFile(path, y, 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(testenv.Collector(t), "validate", "--config", path)
			cmd.Env = append(os.Environ(), "OTEL_TOKEN=t", render.ReceiverTokenEnv+"=r", render.PluginTokenEnv+"=p")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("validate: %v\n%s", err, out)
			}
		})
	}
}
