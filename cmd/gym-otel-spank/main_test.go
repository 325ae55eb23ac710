package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const siteYAML = "otel:\n  endpoint: https://otlp.example.com\n  service_name: svc\n  binary: /usr/bin/otelcol-gym\n"

func TestValidateCLI(t *testing.T) {
	dir := t.TempDir()
	site := writeFile(t, dir, "site.yaml", siteYAML)
	t.Setenv("OTEL_TOKEN", "s3cret-value")
	code, out, errOut := runCLI(t, "validate", "--site", site)
	if code != 0 || !strings.HasPrefix(out, "gym-otel: valid: endpoint https://otlp.example.com") || errOut != "" {
		t.Fatalf("valid: %d %q %q", code, out, errOut)
	}
	bad := writeFile(t, dir, "bad.yaml", "otel:\n  endpont: x\n  node_metrics_port: \"9100\"\n")
	code, out, errOut = runCLI(t, "validate", "--site", bad)
	if code != 1 || out != "" {
		t.Fatalf("invalid: %d %q", code, out)
	}
	// Every problem in one run: the two of the file, and the service name
	// no layer sets (the misspelt endpoint is one mistake, not two).
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[3], "gym-otel: checked: site file "+bad+" (--site); a bare --gym-otel") {
		t.Fatalf("want one line per problem and the layers checked, got %q", errOut)
	}
	for i, want := range []string{"otel.endpont", "otel.node_metrics_port", "otel.service_name: not set"} {
		if !strings.HasPrefix(lines[i], "gym-otel: ") || !strings.Contains(lines[i], want) {
			t.Errorf("line %q lacks %q", lines[i], want)
		}
	}
	os.Unsetenv("OTEL_TOKEN")
	code, _, errOut = runCLI(t, "validate", "--site", site)
	if code != 1 || !strings.Contains(errOut, "otel.token_env") || !strings.Contains(errOut, "OTEL_TOKEN") {
		t.Fatalf("missing token: %d %q", code, errOut)
	}
	if code, _, _ = runCLI(t, "validate", "--site", site, "--no-token-check"); code != 0 {
		t.Fatalf("--no-token-check: %d", code)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"frobnicate"}, {"validate", "--nope"}, {"render", "extra"}, {"directive"},
		{"render", "--ports", "1,2"}, {"validate", "--site-item", "novalue"}} {
		if code, _, _ := runCLI(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code, _, errOut := runCLI(t, "render", "--help"); code != 0 || !strings.Contains(errOut, "--job-id") {
		t.Errorf("--help: %d %q", code, errOut)
	}
}

func TestRenderNeverPrintsToken(t *testing.T) {
	dir := t.TempDir()
	// delivery: collector: the collector's configuration reads the token
	// (its exporter and resource/backend_auth), by reference only.
	site := writeFile(t, dir, "site.yaml", siteYAML+"  delivery: collector\n")
	t.Setenv("OTEL_TOKEN", "tok-abc-123-never-printed")
	code, out, errOut := runCLI(t, "render", "--site", site, "--spec", "token_resource_attribute=true,job_dir=/runs/%j", "--job-id", "55", "--node", "gn2", "--node-index", "1")
	if code != 0 {
		t.Fatalf("render: %d %s", code, errOut)
	}
	if strings.Contains(out+errOut, "tok-abc-123") {
		t.Fatal("render printed the token")
	}
	for _, want := range []string{"${env:OTEL_TOKEN}", "/runs/55/otel/nodes/gn2/metrics.jsonl"} {
		if !strings.Contains(out, want) {
			t.Errorf("render output lacks %q", want)
		}
	}
	if id, err := render.ConfigIdentity([]byte(out)); err != nil || id["slurm_job_id"] != "55" {
		t.Errorf("render output's identity: %v %v, want slurm_job_id 55", id, err)
	}
}

func TestDirective(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "submit.yaml", "driver: {gym_install: /g}\nservices:\n  policy: {type: vllm}\n")
	code, out, errOut := runCLI(t, "directive", "--config", cfg, "--run-id", "run,1", "--benchmark", "gsm8k", "gym_span_groups=default,verify")
	if code != 0 {
		t.Fatalf("directive: %d %s", code, errOut)
	}
	want := "#SBATCH --gym-otel=config=" + cfg + `,run_id=run\,1,benchmark=gsm8k,gym_span_groups=default\,verify` + "\n"
	if out != want {
		t.Fatalf("directive:\n got %q\nwant %q", out, want)
	}
	if code, _, _ := runCLI(t, "directive", "--config", "relative.yaml"); code != 2 {
		t.Error("relative staged path accepted")
	}
	if code, _, errOut := runCLI(t, "directive", "--config", cfg, "--benchmark", "two words"); code != 1 || !strings.Contains(errOut, "whitespace") {
		t.Errorf("whitespace: %d %q", code, errOut)
	}
}

// validate counts a vllm_pd router's and a Ray cluster's metrics
// endpoints apart from the model services, and says in one note why a ray
// service without a metrics export port is not scraped.
func TestValidateCountsEngineEndpoints(t *testing.T) {
	dir := t.TempDir()
	site := writeFile(t, dir, "site.yaml", siteYAML)
	cfg := writeFile(t, dir, "gym.yaml", `services:
  pd: {type: vllm_pd, container: c, model: m, prefill: {node_pool: a}, decode: {node_pool: b}}
  ray1: {type: ray, container: c, extra_args: "--metrics-export-port 8090"}
  ray2: {type: ray, container: c}
compute: {eos: {type: slurm, account: a, node_pools: {a: {partition: p}, b: {partition: p}}}}
driver: {gym_install: {ref: x}, benchmarks: {b: {}}}
job: {output_path: /o}
`)
	t.Setenv("OTEL_TOKEN", "s3cret-value")
	code, out, errOut := runCLI(t, "validate", "--site", site, "--config", cfg)
	if code != 0 || !strings.Contains(out, "2 model service(s) and 2 router or Ray metrics endpoint(s)") {
		t.Fatalf("validate: %d %q %q", code, out, errOut)
	}
	if strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "services.ray2: Ray serves its metrics only at a port given as --metrics-export-port in services.ray2.extra_args") {
		t.Errorf("want one note, on ray2: %q", errOut)
	}
}
