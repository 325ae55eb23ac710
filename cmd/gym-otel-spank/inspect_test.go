package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
)

// TestInspectCLI: text, --json and --html of the package's testdata (lines
// the real collector wrote), and the errors that name the flag.
func TestInspectCLI(t *testing.T) {
	dir := "../../helper/inspect/testdata/otel"
	code, out, errOut := runCLI(t, "inspect", dir)
	if code != 0 || !strings.Contains(out, "rollouts (spans, ms)     n 3") || errOut != "" {
		t.Fatalf("text: %d %q %q", code, out, errOut)
	}
	code, out, _ = runCLI(t, "inspect", "--json", dir)
	var r struct {
		Version int `json:"version"`
		Spans   struct {
			Total int `json:"total"`
		} `json:"spans"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Version != 1 || r.Spans.Total != 9 {
		t.Fatalf("--json: %d %+v %q", code, r, out)
	}
	missing := filepath.Join(t.TempDir(), "none.js")
	code, _, errOut = runCLI(t, "inspect", "--html", filepath.Join(t.TempDir(), "r.html"), "--chartjs", missing, dir)
	if code != 1 || !strings.Contains(errOut, "--chartjs "+missing+": ") {
		t.Errorf("missing chart.js: %d %q", code, errOut)
	}
	notJS := writeFile(t, t.TempDir(), "x.js", "console.log(1)")
	t.Setenv("GYM_OTEL_CHARTJS", notJS)
	code, _, errOut = runCLI(t, "inspect", "--html", filepath.Join(t.TempDir(), "r.html"), dir)
	if code != 1 || !strings.Contains(errOut, "GYM_OTEL_CHARTJS="+notJS+": not Chart.js") {
		t.Errorf("not chart.js: %d %q", code, errOut)
	}
	code, _, errOut = runCLI(t, "inspect", "--chartjs", notJS, dir)
	if code != 2 || !strings.Contains(errOut, "only with --html") {
		t.Errorf("--chartjs alone: %d %q", code, errOut)
	}
	if code, _, errOut = runCLI(t, "inspect", t.TempDir()); code != 1 || !strings.Contains(errOut, "no metrics.jsonl") {
		t.Errorf("empty dir: %d %q", code, errOut)
	}
	// With Debian's Chart.js: one file with the library inlined.
	t.Setenv("GYM_OTEL_CHARTJS", "")
	if _, err := os.Stat("/usr/share/javascript/chart.js/chart.min.js"); err == nil {
		page := filepath.Join(t.TempDir(), "r.html")
		if code, _, errOut = runCLI(t, "inspect", "--html", page, dir); code != 0 {
			t.Fatalf("--html: %d %q", code, errOut)
		}
		b, _ := os.ReadFile(page)
		if !strings.Contains(string(b), "Chart.js v") || strings.Contains(string(b), "src=\"http") {
			t.Errorf("--html page does not inline Chart.js or loads from the network")
		}
	}
}

// TestInspectRequireTargets: --require-targets exits 1 naming each target
// of collector.yaml without an answered scrape, and 0 when all answered.
func TestInspectRequireTargets(t *testing.T) {
	dir := t.TempDir()
	cfg, err := os.ReadFile("../../helper/render/testdata/two-services.golden.yaml")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "collector.yaml", string(cfg))
	up := func(job, instance string, v int) string {
		return `{"resourceMetrics":[{"resource":{"attributes":[{"key":"service.instance.id","value":{"stringValue":"` + instance +
			`"}},{"key":"service.name.override","value":{"stringValue":"` + job + `"}},{"key":"host.name","value":{"stringValue":"gn1"}}]},` +
			`"scopeMetrics":[{"metrics":[{"name":"up","gauge":{"dataPoints":[{"timeUnixNano":"1000000000","asDouble":` + strconv.Itoa(v) + `}]}}]}]}]}` + "\n"
	}
	writeFile(t, dir, "metrics.jsonl", up("gym-vllm/policy", "gn1:8000", 1)+up("node", "gn1:9100", 1)+up("dcgm", "gn1:9400", 0))
	code, out, errOut := runCLI(t, "inspect", "--require-targets", dir)
	if code != 1 || !strings.Contains(errOut, "scrape target dcgm (gn1:9400) has no sample") || strings.Contains(errOut, "policy") ||
		!strings.Contains(out, "target dcgm (gn1:9400): 1 scrape, 0 answered  FAILED 1") {
		t.Errorf("one target unanswered: %d\n%s\n%s", code, out, errOut)
	}
	writeFile(t, dir, "metrics.jsonl", up("gym-vllm/policy", "gn1:8000", 1)+up("node", "gn1:9100", 1)+up("dcgm", "gn1:9400", 1))
	if code, _, errOut = runCLI(t, "inspect", "--require-targets", dir); code != 0 {
		t.Errorf("all answered: %d %s", code, errOut)
	}
}

// TestInspectLineBeingWritten: a running job's last jsonl line without its
// newline is a line being written, said in bytes, not a parse error; once
// state.json says the collector drained, the same line is one.
func TestInspectLineBeingWritten(t *testing.T) {
	dir := t.TempDir()
	half := `{"resourceMetrics":[{"resource":{"attribu`
	writeFile(t, dir, "metrics.jsonl", `{"resourceMetrics":[]}`+"\n"+half)
	for _, c := range []struct {
		status, want string
		bad          int
	}{
		{jobdir.StatusReady, "    metrics.jsonl: " + strconv.Itoa(len(half)) + " bytes of a line being written (the collector runs)\n", 0},
		{jobdir.StatusDrained, "    metrics.jsonl first bad line 2: ", 1},
	} {
		if err := jobdir.WriteState(dir, jobdir.State{Status: c.status}); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := runCLI(t, "inspect", dir)
		if code != 0 || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d %s\n%s\nwant %q", c.status, code, errOut, out, c.want)
		}
		code, out, _ = runCLI(t, "inspect", "--json", dir)
		var r struct {
			Health struct {
				BadLines int `json:"bad_lines"`
				Dirs     []struct {
					Lines   map[string]int `json:"lines"`
					Writing map[string]int `json:"writing_bytes"`
				} `json:"dirs"`
			} `json:"health"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 || r.Health.BadLines != c.bad || len(r.Health.Dirs) != 1 {
			t.Fatalf("%s: --json: %v %d %+v", c.status, err, code, r.Health)
		}
		if d := r.Health.Dirs[0]; c.bad == 0 && (d.Lines["metrics"] != 1 || d.Writing["metrics"] != len(half)) {
			t.Errorf("%s: lines %v writing %v", c.status, d.Lines, d.Writing)
		}
	}
}

// TestInspectSacct: inspect asks sacct for the job the files name (77
// here) and, where there is no sacct, keeps the outcome the files give
// and says why on its first line; --no-sacct does not ask.
func TestInspectSacct(t *testing.T) {
	dir := "../../helper/inspect/testdata/otel"
	saved := slurm.Dirs
	t.Cleanup(func() { slurm.Dirs = saved })
	slurm.Dirs = []string{t.TempDir()}
	t.Setenv("PATH", t.TempDir())
	code, out, errOut := runCLI(t, "inspect", dir)
	// The first lines, their wrapping undone.
	first := strings.Join(strings.Fields(strings.Join(strings.SplitN(out, "\n", 5)[:4], " ")), " ")
	if code != 0 || !strings.Contains(first, "== outcome: job 77 unknown") || !strings.Contains(first, "; sacct not found)") {
		t.Errorf("without sacct: %d %q\n%s", code, errOut, out)
	}
	code, out, errOut = runCLI(t, "inspect", "--no-sacct", dir)
	first = strings.Join(strings.Fields(strings.Join(strings.SplitN(out, "\n", 5)[:4], " ")), " ")
	if code != 0 || !strings.Contains(first, "sacct not asked (--no-sacct)") || strings.Contains(first, "no answer") {
		t.Errorf("--no-sacct: %d %q\n%s", code, errOut, first)
	}
}
