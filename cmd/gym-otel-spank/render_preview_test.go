package main

import (
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gym-otel-spank/gym-otel-spank/helper/callbacks"
	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/helper/supervise"
)

// TestRenderIsTheNodesFile renders a job's settings through `render` and
// through the supervisor's path (supervise.NodeConfig) with the same
// inputs and real node facts: the two documents are identical except for
// the placeholders the preview lists on top, and each placeholder stands
// for one value, the node's.
func TestRenderIsTheNodesFile(t *testing.T) {
	t.Setenv("SLURM_CLUSTER_NAME", "")
	site, _ := filepath.Abs("../../helper/render/testdata/site.yaml")
	gym, _ := filepath.Abs("../../helper/render/testdata/gym-two-services.yaml")
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, spec string
		args       []string
		nodeIndex  int
	}{
		{"first node", "run_id=r-%j,benchmark=gsm8k", nil, 0},
		{"second node, job dir with %j", "job_dir=/runs/%j,gym_logs=false", []string{"--node-index", "1"}, 1},
		{"job id given", "token_resource_attribute=true", []string{"--job-id", "1234"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"render", "--site", site, "--config", gym, "--spec", c.spec}, c.args...)
			code, out, errOut := runCLI(t, args...)
			if code != 0 {
				t.Fatalf("render: %d %s", code, errOut)
			}
			var doc map[string]any
			if err := yaml.Unmarshal([]byte(out), &doc); err != nil || doc["receivers"] == nil {
				t.Fatalf("render's output is not the YAML document: %v", err)
			}

			// The node's path: the submit resolves and encodes the
			// settings, the supervisor decodes and validates them
			// (optionsFromEnv), then writes collector.yaml.
			wd, _ := os.Getwd()
			env := func(k string) (string, bool) {
				if k == "OTEL_TOKEN" {
					return "tok", true
				}
				return "", false
			}
			sub, err := callbacks.Submit(callbacks.Args{Site: site}, "config="+gym+","+c.spec, wd, env)
			if err != nil {
				t.Fatal(err)
			}
			r, err := config.Decode(sub.Encoded)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Validate(nil); err != nil {
				t.Fatal(err)
			}
			f := jobfacts.Facts{JobID: "1234", Node: "gn7", NodeIndex: c.nodeIndex, User: me.Username,
				Cluster: "c1", RestartCount: "2", SLUID: "s9", HeadNode: "gn1"}
			ports := render.Ports{OTLPGRPC: 41001, OTLPHTTP: 41002, Health: 41003, Telemetry: 41004, Final: 41005, Plugin: 41006}
			node, err := supervise.NodeConfig(r, f, ports, "")
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{
				render.PlaceholderJobID: "1234", render.PlaceholderNode: "gn7", render.PlaceholderHeadNode: "gn1", render.PlaceholderCluster: "c1",
				render.PlaceholderRestartCount: "2", render.PlaceholderSLUID: "s9",
				render.PlaceholderJobUUID:  render.LensUUID("nemo.lens.job/c1/1234"),
				render.PlaceholderRunUUID:  render.LensUUID("nemo.lens.run/c1/1234/sr2"),
				render.PlaceholderOTLPGRPC: "41001", render.PlaceholderOTLPHTTP: "41002", render.PlaceholderHealth: "41003",
				render.PlaceholderTelemetry: "41004", render.PlaceholderFinal: "41005", render.PlaceholderPlugin: "41006",
			}
			got := matchPreview(t, out, string(node))
			for ph, v := range got {
				if want[ph] != v {
					t.Errorf("%s stands for %q in the node's file, want %q", ph, v, want[ph])
				}
			}
			for _, ph := range []string{render.PlaceholderOTLPGRPC, render.PlaceholderFinal, render.PlaceholderPlugin, render.PlaceholderNode, render.PlaceholderHeadNode, render.PlaceholderRunUUID} {
				if _, ok := got[ph]; !ok {
					t.Errorf("%s: not a placeholder of the preview", ph)
				}
			}
			if _, ok := got[render.PlaceholderJobID]; ok == (len(c.args) == 2 && c.args[0] == "--job-id") {
				t.Errorf("job id placeholder present: %v with %v", ok, c.args)
			}
		})
	}
}

// matchPreview checks that preview is a comment block listing its
// placeholders followed by node with each listed placeholder in place of
// one value, and returns the value each placeholder stands for.
func matchPreview(t *testing.T, preview, node string) map[string]string {
	t.Helper()
	lines := strings.SplitAfter(preview, "\n")
	listed := map[string]bool{}
	i := 0
	for ; i < len(lines) && strings.HasPrefix(lines[i], render.PreviewTag); i++ {
		for _, ph := range render.PreviewPlaceholders() {
			if strings.HasPrefix(strings.TrimSpace(strings.TrimPrefix(lines[i], render.PreviewTag+":")), ph+" ") {
				listed[ph] = true
			}
		}
	}
	if len(listed) == 0 {
		t.Fatalf("no placeholder listed on top of the preview:\n%s", preview)
	}
	body := strings.Join(lines[i:], "")
	if strings.Contains(body, render.PreviewTag) {
		t.Errorf("a %s line past the top of the preview", render.PreviewTag)
	}
	// A regular expression of the body: each listed placeholder matches
	// one value; everything else matches itself.
	var names []string
	alt := make([]string, 0, len(listed))
	for ph := range listed {
		alt = append(alt, regexp.QuoteMeta(ph))
	}
	re := regexp.MustCompile(strings.Join(alt, "|"))
	var pat strings.Builder
	pat.WriteString(`\A`)
	last := 0
	for _, m := range re.FindAllStringIndex(body, -1) {
		pat.WriteString(regexp.QuoteMeta(body[last:m[0]]))
		pat.WriteString(`([^\s"/:]+)`)
		names = append(names, body[m[0]:m[1]])
		last = m[1]
	}
	pat.WriteString(regexp.QuoteMeta(body[last:]) + `\z`)
	for ph := range listed {
		if !strings.Contains(body, ph) {
			t.Errorf("%s listed but not in the document", ph)
		}
	}
	for _, ph := range render.PreviewPlaceholders() {
		if !listed[ph] && strings.Contains(body, ph) {
			t.Errorf("%s in the document but not listed on top", ph)
		}
	}
	m := regexp.MustCompile(pat.String()).FindStringSubmatch(node)
	if m == nil {
		t.Fatalf("the node's file differs from the preview beyond its placeholders:\n--- preview\n%s\n--- node\n%s", preview, node)
	}
	got := map[string]string{}
	for k, name := range names {
		v := m[k+1]
		if prev, ok := got[name]; ok && prev != v {
			t.Errorf("%s stands for %q and %q", name, prev, v)
		}
		got[name] = v
	}
	if _, err := strconv.Atoi(got[render.PlaceholderOTLPGRPC]); err != nil {
		t.Errorf("OTLP gRPC port %q", got[render.PlaceholderOTLPGRPC])
	}
	return got
}

// TestRenderPortsGiven: ports given with --ports are shown as given; only
// the supervisor's own final-figures port stays a placeholder.
func TestRenderPortsGiven(t *testing.T) {
	site, _ := filepath.Abs("../../helper/render/testdata/site.yaml")
	code, out, errOut := runCLI(t, "render", "--site", site, "--ports", "41001,41002,41003,41004")
	if code != 0 {
		t.Fatalf("render: %d %s", code, errOut)
	}
	for _, want := range []string{"endpoint: 127.0.0.1:41001\n", "endpoint: 127.0.0.1:41002\n", "endpoint: 127.0.0.1:41003\n", "port: 41004\n",
		"http://127.0.0.1:" + render.PlaceholderFinal + "/v1/metrics", render.PlaceholderFinal + "  "} {
		if !strings.Contains(out, want) {
			t.Errorf("render --ports: no %q in\n%s", want, out)
		}
	}
	for _, ph := range []string{render.PlaceholderOTLPGRPC, render.PlaceholderOTLPHTTP, render.PlaceholderHealth, render.PlaceholderTelemetry} {
		if strings.Contains(out, ph) {
			t.Errorf("render --ports still shows %s", ph)
		}
	}
	if code, _, errOut := runCLI(t, "render", "--help"); code != 0 || !strings.Contains(errOut, "placeholder in angle brackets") || !strings.Contains(errOut, render.PreviewTag) {
		t.Errorf("render --help does not explain the placeholders: %d %q", code, errOut)
	}
	if code, _, errOut := runCLI(t, "render", "--site", site, "--ports", "41001,41002,41003,0"); code != 2 || !strings.Contains(errOut, "--ports") {
		t.Errorf("--ports with 0: %d %q", code, errOut)
	}
}
