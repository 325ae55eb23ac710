package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeGym(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "submit.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const gymTail = `driver: {gym_install: {ref: v0.3.0}, benchmarks: {b: {}}}
job: {output_path: /lustre/runs}
`

// TestGymInterpolationOnlyInReadValues: a ${...} left in a value the plugin
// reads is refused, naming the line; the same text anywhere else (shell
// text, env, extra arguments, scratch keys) is Gym's and is left alone.
func TestGymInterpolationOnlyInReadValues(t *testing.T) {
	refused := map[string]string{
		"port":         "services:\n  p: {type: vllm, container: c, model: m, port: \"${oc.env:PORT}\"}\n",
		"model":        "services:\n  p: {type: vllm, container: c, model: \"${oc.env:MODEL}\"}\n",
		"tier pool":    "services:\n  pd: {type: vllm_pd, container: c, model: m, prefill: {node_pool: \"${p}\"}, decode: {node_pool: d}}\ncompute: {eos: {type: slurm, account: a, node_pools: {p: {partition: x}, d: {partition: x}}}}\n",
		"pool nodes":   "services:\n  p: {type: vllm, container: c, model: m}\ncompute: {eos: {type: slurm, account: a, node_pools: {g: {partition: x, nodes: \"${N}\"}}}}\n",
		"otel key":     "otel: {component: \"${oc.env:C}\"}\n",
		"policy_model": "services:\n  p: {type: vllm, container: c, model: m}\n",
	}
	for name, body := range refused {
		tail := gymTail
		if name == "policy_model" {
			tail = "driver: {gym_install: {ref: v0.3.0}, policy_model: \"${oc.select:x}\", benchmarks: {b: {}}}\njob: {output_path: /lustre/runs}\n"
		}
		_, err := LoadGymConfig(writeGym(t, body+tail))
		if err == nil || !strings.Contains(err.Error(), "unresolved interpolation") {
			t.Errorf("%s: %v, want an unresolved interpolation", name, err)
		}
	}
	kept := `_scratch: ${oc.env:HOME}/x
services:
  p:
    type: vllm
    container: c
    model: m
    pre_command: "export X=${X:-$(hostname)}"
    env: {HF_HOME: "${HOME}/hf"}
    extra_args: --max-model-len ${LEN:-8192}
    health_check: {path: "/health?x=${y}"}
compute: {eos: {type: slurm, account: a, extra_args: {comment: "${USER}"}, node_pools: {g: {partition: x}}}}
driver: {gym_install: {ref: v0.3.0}, policy_host: "${oc.env:HEAD_NODE_IP}", env: {T: "${T}"}, benchmarks: {b: {run: {u: "http://${oc.env:HEAD_NODE_IP}:8000/v1"}}}}
job: {output_path: /lustre/runs}
`
	g, err := LoadGymConfig(writeGym(t, kept))
	if err != nil {
		t.Fatalf("shell text outside the read values: %v", err)
	}
	if len(g.Services) != 1 || g.Services[0].Port != 8000 || !g.Services[0].RunsOn(0) {
		t.Errorf("services %+v", g.Services)
	}
}

// TestGymKubernetesComputeIgnored: Gym's compute of type kubernetes is not
// a Slurm cluster: it is ignored with a note, and the slurm entry beside it
// is the cluster.
func TestGymKubernetesComputeIgnored(t *testing.T) {
	body := `services:
  p: {type: vllm, container: c, model: m, node_pool: b}
compute:
  k8s: {type: kubernetes, pvc_name: runs, gpus_per_node: 8, node_selector: {a: b}}
  eos: {type: slurm, account: a, node_pools: {a: {partition: x}, b: {partition: x}}}
` + gymTail
	g, err := LoadGymConfig(writeGym(t, body))
	if err != nil {
		t.Fatal(err)
	}
	if g.Cluster != "eos" || len(g.Services) != 1 || !g.Services[0].RunsOn(1) || g.Services[0].RunsOn(0) {
		t.Errorf("cluster %q services %+v", g.Cluster, g.Services)
	}
	if len(g.Notes) != 1 || !strings.Contains(g.Notes[0], "compute.k8s is of type kubernetes") {
		t.Errorf("notes %q", g.Notes)
	}
	only := "services:\n  p: {type: vllm, container: c, model: m}\ncompute: {k8s: {type: kubernetes, pvc_name: runs}}\n" + gymTail
	g, err = LoadGymConfig(writeGym(t, only))
	if err != nil || g.Cluster != "" || len(g.Services) != 1 {
		t.Errorf("kubernetes only: %v, cluster %q, services %+v", err, g.Cluster, g.Services)
	}
}

// TestGymPDTierWithoutPool: Gym refuses a vllm_pd tier without a node_pool
// (api.py, SubmitConfig._resolve_and_validate_placements), and so does the
// plugin, naming the tier's key.
func TestGymPDTierWithoutPool(t *testing.T) {
	body := `services:
  pd: {type: vllm_pd, container: c, model: m, prefill: {node_pool: a}, decode: {tensor_parallel_size: 8}}
compute: {eos: {type: slurm, account: a, node_pools: {a: {partition: x}, b: {partition: x}}}}
` + gymTail
	_, err := LoadGymConfig(writeGym(t, body))
	if err == nil || !strings.Contains(err.Error(), "services.pd.decode.node_pool: not set") {
		t.Errorf("%v, want services.pd.decode.node_pool: not set", err)
	}
}

// TestGymModelDumpDefaults: a Gym config that writes every default of Gym's
// otel: block (a model_dump) keeps the site's values of the deployment's
// keys (endpoint, binary, ...); the job's tuning keys are the config's even
// at Gym's default, as Gym's executor uses them; a value other than Gym's
// default, and a quoted "15", are still the config's.
func TestGymModelDumpDefaults(t *testing.T) {
	site := filepath.Join(t.TempDir(), "site.yaml")
	if err := os.WriteFile(site, []byte("otel:\n  endpoint: https://otlp.example.com\n  service_name: s\n  binary: /opt/otelcol-gym\n  scrape_interval_seconds: 30\n  gpu_metrics_port: 9500\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dump := `otel: {enabled: true, binary: otelcol-contrib, container: null, endpoint: null, token_env: OTEL_TOKEN,
  service_name: null, component: gym-vllm, gym_telemetry: true, gym_span_groups: "default,verify", gym_logs: true,
  gpu_metrics_port: 9400, node_metrics_port: 9100, scrape_interval_seconds: 15, health_check_timeout_seconds: 300}
services:
  p: {type: vllm, container: c, model: m}
` + gymTail
	r, err := Resolve(Inputs{SiteFile: site, Spec: "config=" + writeGym(t, dump), WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	o := r.Otel
	if o.Binary != "/opt/otelcol-gym" || o.Endpoint != "https://otlp.example.com" || o.ScrapeIntervalSeconds != 15 || o.GPUMetricsPort != 9400 || !o.Enabled {
		t.Errorf("binary %q endpoint %q interval %d gpu port %d enabled %v: want the site's binary and endpoint, the config's interval 15 and port 9400",
			o.Binary, o.Endpoint, o.ScrapeIntervalSeconds, o.GPUMetricsPort, o.Enabled)
	}
	set := "otel: {scrape_interval_seconds: 5, gpu_metrics_port: null}\nservices:\n  p: {type: vllm, container: c, model: m}\n" + gymTail
	r, err = Resolve(Inputs{SiteFile: site, Spec: "config=" + writeGym(t, set), WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if r.Otel.ScrapeIntervalSeconds != 5 || r.Otel.GPUMetricsPort != 0 {
		t.Errorf("config values lost: interval %d gpu port %d", r.Otel.ScrapeIntervalSeconds, r.Otel.GPUMetricsPort)
	}
	quoted := "otel: {scrape_interval_seconds: \"15\"}\nservices:\n  p: {type: vllm, container: c, model: m}\n" + gymTail
	if _, err := Resolve(Inputs{SiteFile: site, Spec: "config=" + writeGym(t, quoted), WorkDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "otel.scrape_interval_seconds") {
		t.Errorf("quoted default: %v", err)
	}
}

// TestGymLocalNodeMetricsKeys: the keys of Gym's published executor for
// its local copy's node_exporter series are read from a Gym config's
// otel: block: null keeps every series, a list replaces the default, the
// extra patterns add to it; a pattern that is not a regular expression is
// an error naming the key.
func TestGymLocalNodeMetricsKeys(t *testing.T) {
	load := func(otel string) *Resolved {
		t.Helper()
		body := "otel: " + otel + "\nservices:\n  p: {type: vllm, container: c, model: m}\n" + gymTail
		r, err := Resolve(Inputs{Spec: "config=" + writeGym(t, body), WorkDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := load(`{local_node_metrics: null, local_node_metrics_extra: ["node_hwmon_.*"]}`); r.Otel.LocalNodeMetrics != nil ||
		len(r.Otel.LocalNodeMetricsExtra) != 1 || r.Otel.LocalNodeMetricsExtra[0] != "node_hwmon_.*" {
		t.Errorf("null and extra: %q %q", r.Otel.LocalNodeMetrics, r.Otel.LocalNodeMetricsExtra)
	}
	if r := load(`{local_node_metrics: [node_load1]}`); len(r.Otel.LocalNodeMetrics) != 1 || r.Otel.LocalNodeMetrics[0] != "node_load1" {
		t.Errorf("list: %q", r.Otel.LocalNodeMetrics)
	}
	if r := load(`{scrape_interval_seconds: 15}`); len(r.Otel.LocalNodeMetrics) != len(DefaultLocalNodeMetrics) {
		t.Errorf("default: %q", r.Otel.LocalNodeMetrics)
	}
	body := "otel: {local_node_metrics: [\"node_(\"]}\nservices:\n  p: {type: vllm, container: c, model: m}\n" + gymTail
	if _, err := Resolve(Inputs{Spec: "config=" + writeGym(t, body), WorkDir: t.TempDir()}); err == nil ||
		!strings.Contains(err.Error(), "otel.local_node_metrics") || !strings.Contains(err.Error(), "not a regular expression") {
		t.Errorf("a bad pattern: %v", err)
	}
}

// TestGymNearMissKeys: a key of a Gym config's otel: block one edit from a
// known key (a letter added, dropped or changed, two neighbours swapped)
// is an error naming the key, its value and the known key, as the same
// typo is in a site file; a key far from every known one stays a note.
func TestGymNearMissKeys(t *testing.T) {
	for _, c := range []struct{ key, value, known string }{
		{"scrape_intervall_seconds", "10", "scrape_interval_seconds"}, // added
		{"endpoit", "https://x", "endpoint"},                          // dropped
		{"gym_lags", "false", "gym_logs"},                             // changed
		{"servcie_name", "svc", "service_name"},                       // swapped
		{"on_failur", "fail", "on_failure"},                           // a plugin key, not Gym's
	} {
		body := "otel:\n  " + c.key + ": " + c.value + "\nservices:\n  p: {type: vllm, container: c, model: m}\n" + gymTail
		path := writeGym(t, body)
		_, err := LoadGymConfig(path)
		want := path + ":2: otel." + c.key + ": " + c.value + ": unknown key, one letter from otel." + c.known + ` (did you mean "` + c.known + `"?)`
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v\nwant %s", c.key, err, want)
		}
	}
	if k, ok := NearMiss("local_node_metrics"); ok {
		t.Errorf("local_node_metrics taken for a near miss of %s", k)
	}
	if _, ok := NearMiss("endpoint"); ok {
		t.Error("a known key taken for a near miss")
	}
}

// TestGymYAMLErrorLine: a YAML error in the otel: block of a larger Gym
// config names the file's line of the problem (the parser names the line
// above, where its context began) and the block.
func TestGymYAMLErrorLine(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{"driver: {gym_install: /g}\nservices:\n  p: {type: vllm, container: c, model: m}\n\n\notel:\n  endpoint: https://x\n  scrape_interval_seconds: [1\n  gym_logs: true\n",
			":8: not valid YAML: did not find expected ',' or ']' (in the otel: block)"},
		{"driver: {gym_install: /g}\n\n\notel:\n  endpoint: https://x\n   gym_logs: true\n",
			":6: not valid YAML: mapping values are not allowed in this context (in the otel: block)"},
	} {
		path := writeGym(t, c.body)
		_, err := LoadGymConfig(path)
		if err == nil || !strings.HasPrefix(err.Error(), path+c.want) {
			t.Errorf("%v\nwant %s%s", err, path, c.want)
		}
	}
}
