package config

import (
	"github.com/gym-otel-spank/gym-otel-spank/helper/yamlnode"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func parseOtelYAML(t *testing.T, src string) (Layer, error) {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatalf("test YAML: %v", err)
	}
	root := doc.Content[0]
	n, err := yamlnode.Lookup("t.yaml", root, "otel")
	if err != nil {
		return Layer{}, err
	}
	return ParseOtelNode("t.yaml", n)
}

func TestOtelBlockBadValues(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       []string // every substring must be in the error
	}{
		{"unknown key suggests", "otel:\n  endpont: https://x\n", []string{"t.yaml:2", "otel.endpont", "unknown key", `did you mean "endpoint"`}},
		{"duplicate key", "otel:\n  component: a\n  component: b\n", []string{"otel.component", "duplicate", "line 2"}},
		{"bool yes", "otel:\n  gym_logs: yes\n", []string{"otel.gym_logs", "expected true or false", `"yes"`}},
		{"bool on", "otel:\n  enabled: on\n", []string{"otel.enabled", "expected true or false"}},
		{"bool quoted", "otel:\n  gym_telemetry: \"true\"\n", []string{"otel.gym_telemetry", "expected true or false"}},
		{"bool null", "otel:\n  gym_logs: null\n", []string{"otel.gym_logs", "null is not allowed"}},
		{"port quoted", "otel:\n  node_metrics_port: \"9100\"\n", []string{"otel.node_metrics_port", `"9100"`, "without quotes"}},
		{"port zero", "otel:\n  node_metrics_port: 0\n", []string{"otel.node_metrics_port", "0 is out of range 1..65535"}},
		{"port 65536", "otel:\n  gpu_metrics_port: 65536\n", []string{"otel.gpu_metrics_port", "65536 is out of range"}},
		{"port negative", "otel:\n  gpu_metrics_port: -1\n", []string{"otel.gpu_metrics_port", "-1 is out of range"}},
		{"port float", "otel:\n  node_metrics_port: 9100.5\n", []string{"otel.node_metrics_port", "9100.5"}},
		{"port list", "otel:\n  node_metrics_port: [9100]\n", []string{"otel.node_metrics_port", "got a list"}},
		{"interval zero", "otel:\n  scrape_interval_seconds: 0\n", []string{"otel.scrape_interval_seconds", "0 is out of range 1..3600"}},
		{"interval huge", "otel:\n  health_check_timeout_seconds: 86400\n", []string{"otel.health_check_timeout_seconds", "out of range"}},
		{"interval string", "otel:\n  scrape_interval_seconds: 15s\n", []string{"otel.scrape_interval_seconds", `"15s"`}},
		{"endpoint null", "otel:\n  endpoint: null\n", []string{"otel.endpoint", "null is not allowed"}},
		{"string as map", "otel:\n  service_name: {a: b}\n", []string{"otel.service_name", "got a mapping"}},
		{"on_failure", "otel:\n  on_failure: drain\n", []string{"otel.on_failure", "continue, fail", `"drain"`}},
		{"mode", "otel:\n  output_dir_mode: \"0600\"\n", []string{"otel.output_dir_mode", "0700"}},
		{"not a mapping", "otel: [a]\n", []string{"otel:", "expected a mapping"}},
		{"sample limit zero", "otel:\n  scrape_sample_limit: 0\n", []string{"otel.scrape_sample_limit", "0 is out of range 100..10000000"}},
		{"body limit huge", "otel:\n  scrape_body_size_limit_mib: 4096\n", []string{"otel.scrape_body_size_limit_mib", "4096 is out of range 1..1024"}},
		{"body limit unit", "otel:\n  scrape_body_size_limit_mib: 16MiB\n", []string{"otel.scrape_body_size_limit_mib", `"16MiB"`}},
		{"label limit", "otel:\n  scrape_label_limit: 2\n", []string{"otel.scrape_label_limit", "out of range 8..1000"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseOtelYAML(t, c.yaml)
			if err == nil {
				t.Fatalf("no error for %q", c.yaml)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestOtelBlockGoodValues(t *testing.T) {
	l, err := parseOtelYAML(t, `otel:
  component: no
  service_name: off
  gym_span_groups: y
  gpu_metrics_port: null
  node_metrics_port: 9101
  container: null
  enabled: True
  output_dir_mode: "750"
`)
	if err != nil {
		t.Fatal(err)
	}
	o := l.Apply(Defaults())
	if o.Component != "no" || o.ServiceName != "off" || o.GymSpanGroups != "y" {
		t.Errorf("string keys must keep no/off/y as strings: %+v", o)
	}
	if o.GPUMetricsPort != 0 || o.NodeMetricsPort != 9101 || !o.Enabled || o.Container != "" {
		t.Errorf("ports/null: %+v", o)
	}
	if o.OutputDirMode != "0750" {
		t.Errorf("mode normalised to %q", o.OutputDirMode)
	}
	// Absent keys keep their defaults.
	if o.ScrapeIntervalSeconds != 15 || o.TokenEnv != "OTEL_TOKEN" {
		t.Errorf("defaults lost: %+v", o)
	}
}

func TestSpecGrammar(t *testing.T) {
	sp, err := ParseSpec(`config=/j/cfg.yaml,run_id=r\,1,benchmark=a\=b,gym_span_groups=default+verify+sandbox,node_metrics_port=null,job_dir=/runs/%A_%a`)
	if err != nil {
		t.Fatal(err)
	}
	if sp.ConfigPath != "/j/cfg.yaml" || sp.Identity.RunID != "r,1" || sp.Identity.Benchmark != "a=b" || sp.JobDir != "/runs/%A_%a" {
		t.Errorf("parsed %+v", sp)
	}
	want := []Item{{"gym_span_groups", "default,verify,sandbox"}, {"node_metrics_port", "null"}}
	if !reflect.DeepEqual(sp.Otel, want) {
		t.Errorf("otel items %+v", sp.Otel)
	}
	for _, on := range []string{"", "on", "(null)"} {
		if sp, err := ParseSpec(on); err != nil || sp.Off {
			t.Errorf("%q: %+v %v", on, sp, err)
		}
	}
	if sp, _ := ParseSpec("off"); !sp.Off {
		t.Error("off")
	}
	if sp, _ := ParseSpec("enabled=false"); !sp.Off {
		t.Error("enabled=false")
	}
	bad := map[string]string{
		"foo=1":                 "foo=1: unknown item",
		"endpont=https://x":     `did you mean "endpoint"`,
		"config":                "config: expected key=value",
		"a=1,,b=2":              "empty item",
		"run_id=a,run_id=b":     "run_id: given twice",
		`run_id=a\x`:            "bad escape",
		"Run_ID=x":              "not a valid key",
		"=x":                    "not a valid key",
		"node_metrics_port=abc": "",
	}
	for in, want := range bad {
		sp, err := ParseSpec(in)
		if in == "node_metrics_port=abc" {
			// The grammar accepts it; the value is checked by the otel layer.
			_, err = ParseInline("--gym-otel", sp.Otel)
			want = `otel.node_metrics_port=abc: expected port`
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", in, err, want)
		}
	}
}

func TestSpecRoundTrip(t *testing.T) {
	items := []Item{{"run_id", `a,b=c\d`}, {"benchmark", "x"}}
	got, err := SplitItems(FormatSpec(items))
	if err != nil || !reflect.DeepEqual(got, items) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
}

func env(m map[string]string) LookupEnv {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestResolveLayers(t *testing.T) {
	in := Inputs{
		SiteFile:  "testdata/site.yaml",
		SiteItems: []Item{{"scrape_interval_seconds", "30"}, {"component", "site-vllm"}},
		Spec:      "config=testdata/gym-two-services.yaml,component=job-vllm,benchmark=gsm8k",
		WorkDir:   mustAbs(t, "."),
	}
	r, err := Resolve(in)
	if err != nil {
		t.Fatal(err)
	}
	o := r.Otel
	// site file < site items < gym config < spec items
	if o.Binary != "/opt/gym-otel/bin/otelcol-gym" || o.ScrapeIntervalSeconds != 5 || o.Component != "job-vllm" || o.GymSpanGroups != "default,verify,sandbox" {
		t.Errorf("layers: %+v", o)
	}
	if r.Identity.Cluster != "eos" || r.Identity.Model != "llama-3-8b" || r.Identity.Benchmark != "gsm8k" {
		t.Errorf("identity %+v", r.Identity)
	}
	if r.JobDir != "/lustre/runs/run-42" || len(r.Services) != 2 || r.Services[0].Name != "judge" {
		t.Errorf("job dir / services: %q %+v", r.JobDir, r.Services)
	}
	warns, err := r.Validate(env(map[string]string{"OTEL_TOKEN": "t"}))
	if err != nil {
		t.Fatal(err)
	}
	if r.Otel.Endpoint != "https://otlp.example.com/api/otlp" || len(warns) != 0 {
		t.Errorf("endpoint %q warnings %v", r.Otel.Endpoint, warns)
	}
	// The encoded spec carries it all and decodes to the same value.
	s, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(s)
	if err != nil {
		t.Fatal(err)
	}
	back.noGymInstall, back.notes = r.noGymInstall, r.notes
	if !reflect.DeepEqual(back, r) {
		t.Errorf("decode(encode) differs:\n%+v\n%+v", back, r)
	}
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestValidateErrors(t *testing.T) {
	site := "testdata/site.yaml"
	tok := map[string]string{"OTEL_TOKEN": "secret"}
	cases := []struct {
		name string
		in   Inputs
		env  map[string]string
		want []string
	}{
		{"no endpoint no service", Inputs{}, tok, []string{"otel.endpoint: not set", "otel.service_name: not set"}},
		{"token missing", Inputs{SiteFile: site}, map[string]string{}, []string{"otel.token_env", "OTEL_TOKEN", "not set or empty"}},
		{"token empty", Inputs{SiteFile: site}, map[string]string{"OTEL_TOKEN": ""}, []string{"otel.token_env", "OTEL_TOKEN"}},
		{"token_env LD_", Inputs{SiteFile: site, Spec: "token_env=LD_PRELOAD"}, tok, []string{"otel.token_env", "LD_PRELOAD", "reserved"}},
		{"token_env SLURM_", Inputs{SiteFile: site, Spec: "token_env=SLURM_JOB_ID"}, tok, []string{"otel.token_env", "reserved"}},
		{"token_env not ident", Inputs{SiteFile: site, Spec: "token_env=MY-TOKEN"}, tok, []string{"otel.token_env", "not a variable name"}},
		{"gym without install", Inputs{SiteFile: site, Spec: "config=testdata/gym-no-install.yaml"}, tok, []string{"otel.gym_telemetry", "driver.gym_install", "gym_telemetry: false"}},
		{"binary relative", Inputs{SiteFile: site, Spec: "binary=otelcol"}, tok, []string{"otel.binary", `"otelcol"`, "absolute"}},
		{"endpoint ftp", Inputs{SiteFile: site, Spec: "endpoint=ftp://x"}, tok, []string{"otel.endpoint", "http:// or https://"}},
		{"endpoint no host", Inputs{SiteFile: site, Spec: "endpoint=https:///v1"}, tok, []string{"otel.endpoint", "no host"}},
		{"endpoint not url", Inputs{SiteFile: site, Spec: "endpoint=otlp.example.com"}, tok, []string{"otel.endpoint", "http"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.in.WorkDir = mustAbs(t, ".")
			r, err := Resolve(c.in)
			if err != nil {
				t.Fatal(err)
			}
			_, err = r.Validate(env(c.env))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestValidateWithoutGymConfigNeedsNoInstall(t *testing.T) {
	r, err := Resolve(Inputs{SiteFile: "testdata/site.yaml", WorkDir: "/home/u"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Validate(env(map[string]string{"OTEL_TOKEN": "x"})); err != nil {
		t.Fatalf("plain sbatch --gym-otel on site defaults: %v", err)
	}
	if r.JobDir != "/home/u/gym-otel-%j" {
		t.Errorf("default job dir %q", r.JobDir)
	}
}

func TestServicesSamePort(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	clash := write("driver: {gym_install: /g}\nservices:\n  a: {type: vllm}\n  b: {type: vllm}\n")
	r, err := Resolve(Inputs{SiteFile: "testdata/site.yaml", Spec: "config=" + clash, WorkDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Validate(env(map[string]string{"OTEL_TOKEN": "x"}))
	if err == nil || !strings.Contains(err.Error(), "services.a.port and services.b.port: both 8000") {
		t.Fatalf("same port, overlapping nodes: %v", err)
	}
	bad := write("services:\n  a: {type: vllm, port: \"8000\"}\n  b: {type: vllm_pd, port: 70000}\ncompute: {x: 1, y: 2}\n")
	_, err = Resolve(Inputs{Spec: "config=" + bad, WorkDir: dir})
	for _, w := range []string{"services.a.port", "services.b.port", "70000", "compute: expected exactly one cluster, got x, y"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v lacks %q", err, w)
		}
	}
	interp := write("services:\n  a: {type: vllm, port: \"${oc.env:PORT}\"}\n")
	_, err = Resolve(Inputs{Spec: "config=" + interp, WorkDir: dir})
	if err == nil || !strings.Contains(err.Error(), "unresolved interpolation") {
		t.Errorf("interpolation: %v", err)
	}
}

func TestNormalizeEndpoint(t *testing.T) {
	cases := map[string]string{
		"https://otlp.example.com":                   "https://otlp.example.com",
		"https://otlp.example.com/":                  "https://otlp.example.com",
		"https://otlp.example.com/api/otlp/":         "https://otlp.example.com/api/otlp",
		"https://otlp.example.com/v1/traces":         "https://otlp.example.com",
		"https://otlp.example.com/api/v1/metrics/":   "https://otlp.example.com/api",
		"http://127.0.0.1:4318":                      "http://127.0.0.1:4318",
		"https://otlp.example.com:8443/otlp/v1/logs": "https://otlp.example.com:8443/otlp",
	}
	for in, want := range cases {
		got, _, err := NormalizeEndpoint(in)
		if err != nil || got != want {
			t.Errorf("%s: got %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"https://u:p@x", "https://x?a=b", "otlp.example.com:4318", ""} {
		if _, _, err := NormalizeEndpoint(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestHTTPWarns(t *testing.T) {
	r, _ := Resolve(Inputs{SiteFile: "testdata/site.yaml", Spec: "endpoint=http://10.0.0.1:4318", WorkDir: "/w"})
	warns, err := r.Validate(env(map[string]string{"OTEL_TOKEN": "x"}))
	if err != nil || len(warns) != 1 || !strings.Contains(warns[0], "plain http") {
		t.Errorf("warnings %v err %v", warns, err)
	}
}

func TestDecodeRefuses(t *testing.T) {
	for _, s := range []string{"!!!", "e30", "eyJ2IjozfQ", "eyJ2IjoyLCJ4IjoxfQ"} { // junk, {}, {"v":3}, {"v":2,"x":1}
		if _, err := Decode(s); err == nil {
			t.Errorf("%q decoded", s)
		}
	}
}

// What the plugin does not scrape is not its to check: a ray service's or
// an unknown type's odd values are Gym's business.
func TestGymServicesNotScrapedNotChecked(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(p, []byte("services:\n  r: {type: ray, port: \"6379\"}\n  x: {port: [1], type: future}\n  p: {type: vllm, port: 8001}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := LoadGymConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Services) != 1 || g.Services[0].Name != "p" || g.Services[0].Port != 8001 {
		t.Errorf("services %+v", g.Services)
	}
	if len(g.Notes) != 2 || !strings.Contains(g.Notes[0], `services.x: type "future" is not one this plugin knows`) ||
		!strings.Contains(g.Notes[1], "services.r: Ray serves its metrics only at a port given as --metrics-export-port in services.r.extra_args") {
		t.Errorf("notes %q", g.Notes)
	}
}

// A forwarded spec without the scrape limits (0: Prometheus's "no limit")
// or with a forged value fails validation on the node, naming the key.
func TestValidateScrapeLimits(t *testing.T) {
	r, err := Resolve(Inputs{Spec: "endpoint=https://x.example.com,service_name=s", WorkDir: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Validate(nil); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	r.Otel.ScrapeSampleLimit, r.Otel.ScrapeLabelValueLengthLimit = 0, 1<<30
	_, err = r.Validate(nil)
	if err == nil || !strings.Contains(err.Error(), "otel.scrape_sample_limit: 0 is out of range") ||
		!strings.Contains(err.Error(), "otel.scrape_label_value_length_limit: 1073741824 is out of range") {
		t.Errorf("err %v", err)
	}
}

// TestSpecListCommaHint: a comma inside a list value
// (gym_span_groups=default,verify) leaves a part without "=": the error
// says that list values are joined with + and shows the item so joined; a
// stray part after another item gets no such hint.
func TestSpecListCommaHint(t *testing.T) {
	_, err := ParseSpec("run_id=r1,gym_span_groups=default,verify,sandbox")
	for _, want := range []string{
		"--gym-otel: verify: expected key=value (the values of a list item are joined with +, not with a comma: gym_span_groups=default+verify)",
		"--gym-otel: sandbox: expected key=value (the values of a list item are joined with +, not with a comma: gym_span_groups=default+verify+sandbox)",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v\nwant %s", err, want)
		}
	}
	_, err = ParseSpec("run_id=r1,verify")
	if err == nil || err.Error() != "--gym-otel: verify: expected key=value" {
		t.Errorf("a stray part after run_id: %v", err)
	}
}
