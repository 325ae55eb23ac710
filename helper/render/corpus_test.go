package render_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// corpusCase is what Gym's Slurm executor serves for one config of
// testdata/gym-corpus: per node of the job (index = node), the model
// scrape jobs as "<job_name> <target>", sorted.
type corpusCase struct {
	file  string
	nodes [][]string
	off   bool     // otel.enabled: false
	notes []string // substrings, one note each, in order
}

var corpus = []corpusCase{
	{file: "single-node.yaml", nodes: [][]string{{"gym-vllm/policy localhost:8000"}}},
	{file: "two-services.yaml", nodes: [][]string{{"gym-vllm/judge localhost:8001", "gym-vllm/policy localhost:8000"}}},
	// The head serves the API; the headless worker serves no HTTP.
	{file: "multi-node-dp.yaml", nodes: [][]string{{"gym-vllm/policy localhost:8000"}, nil}},
	{file: "ray-across-nodes.yaml", nodes: [][]string{{"gym-vllm/policy localhost:8000"}, nil}},
	// The ray service (port 6379 by default, Ray's GCS) is not scraped:
	// without --metrics-export-port Ray's metrics have no known port.
	{file: "ray-service.yaml", nodes: [][]string{{"gym-vllm/policy localhost:8000"}, nil}, notes: []string{noRayPort}},
	// The router pd (node 0, the driver's) serves vllm_router_* on
	// vllm-router's Prometheus port 29000, not on its API port 8000; each
	// tier serves /metrics on its pool's first node. Router and Ray
	// placement: nemo_gym/orchestration/executors/slurm_script.py at
	// 4df61bf (yaoyu-33/Gym) _build_router_command, _service_nodelist,
	// _srun_nodes, _build_ray_command, _ray_worker_ranges; vllm-router's
	// port: vllm-project/router src/main.rs at 03e9af5 (facts 14-17 of
	// docs/gym-contract.md section 7).
	{file: "vllm-pd.yaml", nodes: [][]string{{"gym-vllm/pd localhost:29000"}, {"gym-vllm/pd-prefill localhost:8001"}, nil, {"gym-vllm/pd-decode localhost:8002"}}},
	{file: "vllm-pd-server-per-node.yaml", nodes: [][]string{
		{"gym-vllm/pd localhost:29000", "gym-vllm/pd-prefill localhost:9001"}, {"gym-vllm/pd-prefill localhost:9001"},
		{"gym-vllm/pd-decode localhost:9200"}, {"gym-vllm/pd-decode localhost:9200"}}},
	// A router pinned to a pool of two nodes runs on both.
	{file: "vllm-pd-router-pinned.yaml", nodes: [][]string{{"gym-vllm/pd localhost:29000"}, {"gym-vllm/pd localhost:29000"},
		{"gym-vllm/pd-prefill localhost:8001"}, {"gym-vllm/pd-decode localhost:8002"}}},
	// Two routers on the driver's node would both bind 29000: a's is
	// scraped, b's is left out with a note.
	{file: "vllm-pd-two-routers.yaml", nodes: [][]string{{"gym-vllm/a localhost:29000", "gym-vllm/a-prefill localhost:8001"},
		{"gym-vllm/a-decode localhost:8002"}, {"gym-vllm/b-prefill localhost:8101"}, {"gym-vllm/b-decode localhost:8102"}},
		notes: []string{"services.b (its vllm-router's Prometheus port): the same port as services.a (its vllm-router's Prometheus port) (29000 on node 0 of the job), so it is not scraped"}},
	// Ray with --metrics-export-port in its extra_args: the head on the
	// driver's node (1, the policy's pool's first) and the worker on pool
	// aux (node 0) serve Ray's metrics at 8090.
	{file: "ray-metrics-export.yaml", nodes: [][]string{{"gym-vllm/cluster localhost:8090"},
		{"gym-vllm/cluster localhost:8090", "gym-vllm/policy localhost:8000"}, nil}},
	{file: "two-pools.yaml", nodes: [][]string{{"gym-vllm/policy localhost:8000"}, nil, {"gym-vllm/judge localhost:8000"}}},
	{file: "ray-serve.yaml", nodes: [][]string{{"gym-vllm/policy localhost:8000"}, nil}},
	{file: "several-benchmarks.yaml", nodes: [][]string{{"gym-vllm/policy localhost:8000"}}},
	{file: "otel-disabled.yaml", off: true},
	// The shapes Gym itself writes (NVIDIA-NeMo/Gym; schema:
	// nemo_gym/orchestration/api.py at 8252f8e; placement:
	// nemo_gym/orchestration/executors/slurm_script.py at 4df61bf, facts
	// 6-10 of docs/gym-contract.md section 7): a model_dump with every
	// default and null, where otel.endpoint: null and otel.service_name:
	// null leave the site's values in force; scratch keys; shell text in
	// pre_command and env; Ray over two pools (not scraped without a
	// metrics export port; the policy's API on its pool's first node);
	// vllm_pd with a judge pool first (the router on node 0 serves
	// vllm_router_* on 29000, each tier on its pool's first node).
	{file: "model-dump.yaml", nodes: [][]string{{"gym-vllm/policy localhost:8000"}, nil, {"gym-vllm/judge localhost:8100"}}},
	{file: "scratch-keys.yaml", nodes: [][]string{{"gym-vllm/policy localhost:8000"}}},
	{file: "shell-text.yaml", nodes: [][]string{{"gym-vllm/policy localhost:8200"}}},
	{file: "ray-two-pools.yaml", nodes: [][]string{{"gym-vllm/policy localhost:8000"}, nil, nil}, notes: []string{noRayPort}},
	{file: "vllm-pd-judge-first.yaml", nodes: [][]string{{"gym-vllm/judge localhost:8000", "gym-vllm/pd localhost:29000"}, {"gym-vllm/pd-prefill localhost:9001"}, {"gym-vllm/pd-decode localhost:9002"}}},
	{file: "tolerated.yaml", nodes: [][]string{{"gym-vllm/policy localhost:8000"}}, notes: []string{
		"otel.on_failure is not a key of Gym's otel: block (gym eval submit refuses it), so it is ignored here: set it in the site file or as the --gym-otel item on_failure=<value>",
		"otel.exemplars: not a key this plugin reads, ignored",
		`services.reranker: type "sglang" is not one this plugin knows (vllm, vllm_pd, ray), so it is not scraped`,
	}},
}

// noRayPort is the note for a ray service without a metrics export port.
const noRayPort = "Ray serves its metrics only at a port given as --metrics-export-port in"

// TestGymCorpus validates every Gym submit config of the corpus and checks
// the model scrape jobs rendered on each node of the job against where
// Gym's executor serves /metrics.
func TestGymCorpus(t *testing.T) {
	dir := filepath.Join(testdata(t), "gym-corpus")
	seen := map[string]bool{}
	for _, c := range corpus {
		seen[c.file] = true
		t.Run(strings.TrimSuffix(c.file, ".yaml"), func(t *testing.T) {
			r, err := config.Resolve(config.Inputs{SiteFile: "testdata/site.yaml",
				Spec: "config=" + filepath.Join(dir, c.file) + ",run_id=r1,benchmark=b", WorkDir: "/home/alice"})
			if err != nil {
				t.Fatal(err)
			}
			warns, err := r.Validate(nil)
			if err != nil {
				t.Fatalf("does not validate: %v", err)
			}
			if c.off {
				if r.Otel.Enabled || len(warns) != 0 {
					t.Errorf("enabled %v, warnings %v", r.Otel.Enabled, warns)
				}
				return
			}
			if len(warns) != len(c.notes) {
				t.Errorf("warnings %q, want %d", warns, len(c.notes))
			}
			for i, w := range warns {
				if i < len(c.notes) && !strings.Contains(w, c.notes[i]) {
					t.Errorf("warning %q lacks %q", w, c.notes[i])
				}
			}
			for node, want := range c.nodes {
				got := modelScrapes(t, r, node)
				if !reflect.DeepEqual(got, want) {
					t.Errorf("node %d: scrape jobs %q, want %q", node, got, want)
				}
			}
			// The real collector accepts what is rendered for every node.
			for node := range c.nodes {
				validateWithCollector(t, r, node)
			}
			// Past the last node Gym places something on, nothing is scraped.
			if got := modelScrapes(t, r, len(c.nodes)); got != nil && len(c.nodes) > 1 {
				t.Errorf("node %d (beyond the pools): %q", len(c.nodes), got)
			}
		})
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, f := range files {
		if !seen[filepath.Base(f)] {
			t.Errorf("%s has no case in the corpus table", filepath.Base(f))
		}
	}
}

// renderNode renders the collector configuration of node index node.
func renderNode(t *testing.T, r *config.Resolved, node int) []byte {
	t.Helper()
	y, err := render.Render(render.Input{Resolved: r,
		Job:       render.Job{User: "alice", JobID: "7", RunID: "r1", Node: fmt.Sprintf("gn%d", node+1), NodeIndex: node},
		Ports:     render.Ports{OTLPGRPC: 41001, OTLPHTTP: 41002, Health: 41003, Telemetry: 41004},
		OutputDir: "/home/alice/otel"})
	if err != nil {
		t.Fatal(err)
	}
	return y
}

// validateWithCollector runs the real collector's validate command on the
// configuration of node index node.
func validateWithCollector(t *testing.T, r *config.Resolved, node int) {
	t.Helper()
	bin := testenv.Collector(t)
	path := filepath.Join(t.TempDir(), "collector.yaml")
	writeFile(t, path, string(renderNode(t, r, node)))
	cmd := exec.Command(bin, "validate", "--config", path)
	cmd.Env = append(os.Environ(), "OTEL_TOKEN=t", render.ReceiverTokenEnv+"=r", render.PluginTokenEnv+"=p")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("node %d: %s validate: %v\n%s", node, bin, err, out)
	}
}

// modelScrapes renders the collector configuration of node index node and
// returns its scrape jobs other than dcgm and node.
func modelScrapes(t *testing.T, r *config.Resolved, node int) []string {
	t.Helper()
	y := renderNode(t, r, node)
	var doc struct {
		Receivers struct {
			Prometheus struct {
				Config struct {
					ScrapeConfigs []struct {
						JobName       string `yaml:"job_name"`
						StaticConfigs []struct {
							Targets []string `yaml:"targets"`
						} `yaml:"static_configs"`
					} `yaml:"scrape_configs"`
				} `yaml:"config"`
			} `yaml:"prometheus"`
		} `yaml:"receivers"`
	}
	if err := yaml.Unmarshal(y, &doc); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range doc.Receivers.Prometheus.Config.ScrapeConfigs {
		if s.JobName == "dcgm" || s.JobName == "node" {
			continue
		}
		for _, sc := range s.StaticConfigs {
			for _, tg := range sc.Targets {
				out = append(out, s.JobName+" "+tg)
			}
		}
	}
	sort.Strings(out)
	return out
}

// TestGymCorpusClash: only two endpoints on one port on one node are an
// error, and the message names keys a Gym config can carry.
func TestGymCorpusClash(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]string{
		"one node": `services:
  policy: {type: vllm, container: c, model: m}
  judge: {type: vllm, container: c, model: j}
compute: {eos: {type: slurm, account: a, node_pools: {gpu: {partition: p, nodes: 1}}}}
driver: {gym_install: {ref: x}, benchmarks: {b: {}}}
job: {output_path: /o}
`,
		"pd tier on the policy's node": `services:
  policy: {type: vllm, container: c, model: m, port: 8001, node_pool: a}
  pd: {type: vllm_pd, container: c, model: m, prefill: {node_pool: a}, decode: {node_pool: b}}
compute: {eos: {type: slurm, account: a, node_pools: {a: {partition: p}, b: {partition: p}}}}
driver: {gym_install: {ref: x}, benchmarks: {b: {}}}
job: {output_path: /o}
`,
	}
	want := map[string]string{
		"one node":                     "services.judge.port and services.policy.port: both 8000 on node 0 of the job",
		"pd tier on the policy's node": "services.pd.prefill.port and services.policy.port: both 8001 on node 0 of the job",
	}
	for name, body := range cases {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
		writeFile(t, p, body)
		r, err := config.Resolve(config.Inputs{SiteFile: "testdata/site.yaml", Spec: "config=" + p, WorkDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.Validate(nil)
		if err == nil || !strings.Contains(err.Error(), want[name]) {
			t.Errorf("%s: %v, want %q", name, err, want[name])
			continue
		}
		if !strings.Contains(err.Error(), "services.<name>.node_pool") || strings.Contains(err.Error(), ".nodes") {
			t.Errorf("%s: the message must suggest only Gym's keys: %v", name, err)
		}
	}
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRoleLabels: the router's and Ray's scrape jobs label their series
// with the Gym service and its role; an engine's carries no such labels.
func TestRoleLabels(t *testing.T) {
	dir := filepath.Join(testdata(t), "gym-corpus")
	for _, c := range []struct {
		file, job, service, role string
		node                     int
	}{
		{"vllm-pd.yaml", "gym-vllm/pd", "pd", "router", 0},
		{"ray-metrics-export.yaml", "gym-vllm/cluster", "cluster", "ray", 1},
		{"ray-metrics-export.yaml", "gym-vllm/policy", "", "", 1},
	} {
		r, err := config.Resolve(config.Inputs{SiteFile: "testdata/site.yaml",
			Spec: "config=" + filepath.Join(dir, c.file) + ",run_id=r1,benchmark=b", WorkDir: "/home/alice"})
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Receivers struct {
				Prometheus struct {
					Config struct {
						ScrapeConfigs []struct {
							JobName       string `yaml:"job_name"`
							StaticConfigs []struct {
								Labels map[string]string `yaml:"labels"`
							} `yaml:"static_configs"`
						} `yaml:"scrape_configs"`
					} `yaml:"config"`
				} `yaml:"prometheus"`
			} `yaml:"receivers"`
		}
		if err := yaml.Unmarshal(renderNode(t, r, c.node), &doc); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, j := range doc.Receivers.Prometheus.Config.ScrapeConfigs {
			if j.JobName != c.job {
				continue
			}
			found = true
			l := j.StaticConfigs[0].Labels
			if l["gym_service"] != c.service || l["role"] != c.role || !strings.HasPrefix(l["instance"], fmt.Sprintf("gn%d:", c.node+1)) {
				t.Errorf("%s node %d: %s labels %v, want gym_service=%q role=%q", c.file, c.node, c.job, l, c.service, c.role)
			}
		}
		if !found {
			t.Errorf("%s node %d: no scrape job %s", c.file, c.node, c.job)
		}
	}
}
