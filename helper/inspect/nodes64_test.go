package inspect

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/internal/jobgen"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// job64 makes the 64-node job dir of the tests (internal/jobgen's Default:
// the recorded two-node job testdata/slurmrun/gym-two-nodes as gn1 and 63
// varied copies of its gn2, gn37 slow, gn50's prolog 5 s late) and
// returns its report and text lines (no line over Width columns).
func job64(t *testing.T) (*Report, []string) {
	t.Helper()
	job := t.TempDir()
	if err := jobgen.Make(filepath.Join("testdata", "slurmrun", "gym-two-nodes", "otel"), filepath.Join(job, "otel"), jobgen.Default(64)); err != nil {
		t.Fatal(err)
	}
	return reportText(t, job)
}

// TestJob64Text: the 64-node job reads on one screen: the outcome and
// the Gym answer in the first 25 lines, the nodes as hostlists (the job
// section's host.name too, and every receipt folded into one line), the
// late prolog named as the phases' outlier, the per-node sections
// aggregated with the outliers in full, the node dirs' health folded, in
// the nodes' natural order; under 250 lines (1913 before) besides the
// energy per step and role.
func TestJob64Text(t *testing.T) {
	_, lines := job64(t)
	text := strings.Join(lines, "\n")
	for _, want := range [][]string{
		{"== outcome: job 2 COMPLETED, exit code 0"},
		{"elapsed", "12.2 s"},
		{"nodes", "64 gn[1-64]"},
		{"gym", "8 rollouts, pass rate 75.0% of 8 verified"},
		{"backend", "nothing lost"},
		{"== gym"},
		{"rollouts (spans, ms)", "n 8"},
		{"rollout throughput", "59.3 per minute"},
		{"verify", "success 75.0%"},
	} {
		if lineWith(lines, 25, want...) < 0 {
			t.Errorf("the first 25 lines lack %q:\n%s", want, strings.Join(lines[:25], "\n"))
		}
	}
	if lineWith(lines, len(lines), "host.name", "gn[1-64]") < 0 {
		t.Errorf("host.name is not one hostlist:\n%s", textSections(text, "job"))
	}
	if rec := textSections(text, "receipts"); !strings.Contains(rec, "64 nodes gn[1-64]: final figures, nothing failed") || strings.Contains(rec, "receipt of job") {
		t.Errorf("receipts not folded:\n%s", rec)
	}
	if lineWith(lines, len(lines), "prolog", " 64 ", "outliers: gn50 (5.243 s)") < 0 {
		t.Errorf("gn50's late prolog not named:\n%s", textSections(text, "Slurm phases"))
	}
	// The per-node sections aggregated: each figure's min, median and max
	// with their nodes, then the outliers in full (gn37's slow server and
	// GPUs), the rest folded; nodes in natural order where listed.
	for sec, wants := range map[string][]string{
		"model servers": {"\n  64 servers on gn[1-64]: min / median / max", "\n    requests             6 (gn37) / 24 / 26 ",
			"\n  gn37 gym-vllm/svc1 model tiny-model\n    requests 6,", "\n  (all)\n"},
		"GPUs": {"\n  gpu 0 on 64 nodes gn[1-64]: min / median / max", "\n    util mean %          3.1 (gn37) / 13.0 / ", "\n  gn37              0 NVIDIA",
			"\n    gn[1-64] gpu 0, gpu 1, gpu 2, gpu 3: not named by Slurm"},
		"hosts":   {"\n  64 hosts on gn[1-64]: min / median / max", "\n  no outliers"},
		"cgroups": {"\n  collector on 64 nodes gn[1-64]: min / median / max", "\n    all of gn[1-64] job:\n", "slurm_<node>/"},
	} {
		got := textSections(text, sec)
		for _, w := range wants {
			if !strings.Contains(got, w) {
				t.Errorf("section %s lacks %q:\n%s", sec, w, got)
			}
		}
		if n := strings.Count(got, "\n"); n > 40 {
			t.Errorf("section %s: %d lines", sec, n)
		}
	}
	// The 63 copies' health reads the same: one block, "<node>" for the
	// name.
	if h := textSections(text, "telemetry health"); !strings.Contains(h, "\n  63 nodes gn[2-64]: lines: metrics 12,") ||
		!strings.Contains(h, "target dcgm (<node>:18365)") || !strings.Contains(h, "\n  gn1: lines:") || strings.Count(h, "\n") > 20 {
		t.Errorf("telemetry health not folded:\n%s", h[:min(len(h), 3000)])
	}
	// The energy per step and role aggregated over the nodes too: its
	// node windows' figures per step, the verdicts as hostlists.
	e := textSections(text, "energy per step and role")
	if n := strings.Count(e, "\n"); n > 60 || !strings.Contains(e, "step 0 on 64 nodes gn[1-64]: min / median / max") || !strings.Contains(e, "on 64 nodes\n") && !strings.Contains(e, "on 64 nodes gn[1-64]") {
		t.Errorf("energy per step and role: %d lines, not aggregated:\n%s", n, e[:min(len(e), 3000)])
	}
	if len(lines) > 251 { // 250 and the one line of no host power
		t.Errorf("%d lines", len(lines))
	}
}

// TestJob64JSON: --json of the 64-node job: the outcome's figures typed
// (numbers as numbers), the 64 nodes' hostlist, every node's server, GPU
// and host in natural order, host.name's 64 values all kept in natural
// order, each identity value its JSON type (the int
// slurm_job_restart_count the number 0, not "0 (int)").
func TestJob64JSON(t *testing.T) {
	r, _ := job64(t)
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Outcome map[string]any `json:"outcome"`
		Servers []struct {
			Node string `json:"node"`
		} `json:"model_servers"`
		GPUs []struct {
			Node string `json:"node"`
		} `json:"gpus"`
		Hosts []struct {
			Node string `json:"node"`
		} `json:"hosts"`
		Job struct {
			Identity map[string][]any `json:"identity"`
		} `json:"job"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	o := got.Outcome
	for k, want := range map[string]float64{"exit_code": 0, "nodes": 64, "rollouts": 8, "pass_rate": 0.75, "queue_wait_seconds": 3} {
		if v, ok := o[k].(float64); !ok || math.Abs(v-want) > 1e-9 {
			t.Errorf("outcome.%s = %#v, want the number %v", k, o[k], want)
		}
	}
	if v, ok := o["elapsed_seconds"].(float64); !ok || v < 12 || v > 12.5 {
		t.Errorf("outcome.elapsed_seconds = %#v, want a number near 12.2", o["elapsed_seconds"])
	}
	if o["hostlist"] != "gn[1-64]" || o["state"] != "COMPLETED" {
		t.Errorf("outcome hostlist %#v, state %#v", o["hostlist"], o["state"])
	}
	// A server a node and their sum, four GPUs a node.
	if len(got.Servers) != 65 || got.Servers[64].Node != "(all)" || len(got.GPUs) != 4*64 || len(got.Hosts) != 64 {
		t.Fatalf("%d servers, %d GPUs, %d hosts: want 64 and their sum, 256, 64", len(got.Servers), len(got.GPUs), len(got.Hosts))
	}
	for i := range 64 {
		want := fmt.Sprintf("gn%d", i+1)
		if got.Servers[i].Node != want || got.GPUs[4*i].Node != want || got.GPUs[4*i+3].Node != want || got.Hosts[i].Node != want {
			t.Fatalf("row %d: server on %s, GPU on %s, host %s: want %s (natural order)", i, got.Servers[i].Node, got.GPUs[4*i].Node, got.Hosts[i].Node, want)
		}
	}
	hosts := got.Job.Identity["host.name"]
	if len(hosts) != 64 {
		t.Errorf("identity host.name keeps %d values, want 64", len(hosts))
	}
	for i, h := range hosts {
		if want := fmt.Sprintf("gn%d", i+1); h != want {
			t.Fatalf("identity host.name[%d] = %#v, want %q (natural order)", i, h, want)
		}
	}
	if rc := got.Job.Identity["slurm_job_restart_count"]; len(rc) != 1 || rc[0] != 0.0 {
		t.Errorf("identity slurm_job_restart_count = %#v, want [0] (a number)", rc)
	}
	if id := got.Job.Identity["slurm_job_id"]; len(id) != 1 || id[0] != "2" {
		t.Errorf("identity slurm_job_id = %#v, want [\"2\"] (a string, as the files have it)", id)
	}
	// The Go reader of --json reads the types back.
	var back Report
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if rc := back.Job.Identity["slurm_job_restart_count"]; len(rc) != 1 || rc[0] != (AttrValue{Text: "0", Kind: "int"}) {
		t.Errorf("read back: slurm_job_restart_count %#v", rc)
	}
}

// TestJob64HTML: the page of the 64-node job in headless Chromium: every
// chart at least its design height with its legend outside the plot (the
// plot 60% of the box or more, whatever the number of series); the
// per-node charts aggregated (the median and band of 63 servers, GPUs and
// hosts) with gn37's slow server and GPU named as outliers; the latency
// histograms summed, not one a server; the phase chart one row a phase
// with gn50's prolog on a row of its own; one time origin (the submit)
// for every chart; the per-node tables as min, median and max rows with
// gn37 named, every row folded below.
func TestJob64HTML(t *testing.T) {
	r, _ := job64(t)
	html, page := writeReportPage(t, r)
	if html == "" {
		return
	}
	var facts []struct {
		ID          string   `json:"id"`
		XOrigin     *string  `json:"x_origin"`
		XMin        *float64 `json:"x_min"`
		Design      float64  `json:"design_height"`
		Box         float64  `json:"box_height"`
		Plot        float64  `json:"plot_height"`
		LegendItems int      `json:"legend_items"`
		Aggregated  int      `json:"aggregated"`
		Outliers    []string `json:"outliers"`
		Labels      []string `json:"labels"`
		Series      []any    `json:"series"`
	}
	if err := json.Unmarshal([]byte(testenv.EvalPage(t, page, "chart-facts")), &facts); err != nil {
		t.Fatal(err)
	}
	// Measured in the page by Chart.js itself: each chart's plot area,
	// the height its legend takes inside the canvas, its rows. A metric
	// chart's box is 280 px: its plot keeps 60% of it or more, whatever
	// the number of series; the phase chart 16 px a row or more; no legend
	// inside a canvas.
	var measured []struct {
		ID     string  `json:"id"`
		Plot   float64 `json:"plot"`
		Legend float64 `json:"legend"`
		Rows   int     `json:"rows"`
		Box    float64 `json:"box"`
	}
	const measure = `JSON.stringify([...document.querySelectorAll('#charts canvas')].map(c => { const ch = Chart.getChart(c);
		return { id: c.id, plot: ch.chartArea.bottom - ch.chartArea.top, rows: (ch.data.labels || []).length, box: c.parentElement.getBoundingClientRect().height,
			legend: ch.legend && ch.options.plugins.legend.display !== false ? ch.legend.height : 0 }; }))`
	if err := json.Unmarshal([]byte(testenv.EvalPageJS(t, page, "chart-facts", measure)), &measured); err != nil {
		t.Fatal(err)
	}
	for _, m := range measured {
		want := 0.6 * 280
		if m.ID == "chart-phases" {
			want = 16 * float64(m.Rows)
		}
		if m.Plot < want || m.Legend > 0 {
			t.Errorf("%s: plot %.0f px of a %.0f px box, legend %.0f px inside the chart: want %.0f px or more and the legend outside", m.ID, m.Plot, m.Box, m.Legend, want)
		}
	}
	if len(measured) != len(facts) {
		t.Errorf("%d canvases, %d charts' facts", len(measured), len(facts))
	}
	byID := map[string]int{}
	origins := map[string]bool{}
	for i, c := range facts {
		byID[c.ID] = i
		if c.Design <= 0 || c.Box < c.Design-1 || c.Plot < 0.6*c.Design {
			t.Errorf("%s: box %.0f px, plot %.0f px: want the design height %.0f and a plot of 60%% of it or more", c.ID, c.Box, c.Plot, c.Design)
		}
		if c.LegendItems > 12 {
			t.Errorf("%s: %d legend items", c.ID, c.LegendItems)
		}
		if c.XOrigin != nil {
			origins[*c.XOrigin] = true
		}
	}
	if len(origins) != 1 || !origins["2026-12-02T03:57:29.000Z"] {
		t.Errorf("time origins %v: want one, the submit 2026-12-02T03:57:29.000Z", origins)
	}
	if len(facts) > 10 {
		t.Errorf("%d charts: want the per-server histograms summed", len(facts))
	}
	for id, outlier := range map[string]string{"chart-throughput": "gn37 gym-vllm/svc1 tiny-model", "chart-kvcache": "gn37 gym-vllm/svc1 tiny-model", "chart-gpu": "gn37 gpu 0"} {
		i, ok := byID[id]
		if !ok {
			t.Errorf("no chart %s", id)
			continue
		}
		c := facts[i]
		if c.Aggregated < 60 || len(c.Outliers) == 0 || !slices.Contains(c.Outliers, outlier) {
			t.Errorf("%s: %d series aggregated, outliers %q: want about 63 and %q named; labels %q", id, c.Aggregated, c.Outliers, outlier, c.Labels)
		}
	}
	if i, ok := byID["chart-load"]; !ok || facts[i].Aggregated < 60 {
		t.Errorf("load1 per node not aggregated")
	}
	if i, ok := byID["chart-phases"]; !ok || len(facts[i].Labels) > 12 || !slices.ContainsFunc(facts[i].Labels, func(l string) bool { return strings.HasPrefix(l, "gn50 prolog (outlier") }) ||
		!slices.Contains(facts[i].Labels, "prolog (64 nodes)") {
		t.Errorf("phase chart not one row a phase with gn50 named: %+v", facts[i])
	}
	if a := strings.Index(html, `<p id="gpu-sharing">`); a < 0 || !strings.Contains(html[a:], "<li>gn[1-64] gpu 0, gpu 1, gpu 2, gpu 3: not named by Slurm") ||
		strings.Count(html[a:a+strings.Index(html[a:], "</ul>")], "<li>") != 1 {
		t.Errorf("the GPUs not the job's alone not folded into one line")
	}
	for _, id := range []string{"servers", "gpus", "hosts", "cgroups"} {
		a := strings.Index(html, `<table id="`+id+`">`)
		if a < 0 {
			t.Errorf("no table %s", id)
			continue
		}
		tbl := html[a : a+strings.Index(html[a:], "</table>")]
		if rows := strings.Count(tbl, "<tr"); rows > 20 || !strings.Contains(tbl, "<tr class=\"agg\"><td>median of 64 gn[1-64]") && !strings.Contains(tbl, "<tr class=\"agg\"><td>median of 63 gn[2-64]") {
			t.Errorf("table %s: %d rows, want min, median and max rows over the nodes:\n%s", id, rows, tbl)
		}
		if !strings.Contains(html, `<details id="`+id+`-all">`) {
			t.Errorf("table %s: every row not kept below", id)
		}
		if row := strings.Index(tbl, "<td>min of 64 gn[1-64] job</td>"); id == "cgroups" && (row < 0 || strings.Contains(tbl[row:row+strings.Index(tbl[row:], "</tr>")], " different)")) {
			t.Errorf("table %s: reasons that differ only by the node's name counted as different:\n%s", id, tbl)
		}
		if id == "servers" || id == "gpus" {
			if !strings.Contains(tbl, `<tr class="outlier"><td>outlier gn37`) {
				t.Errorf("table %s does not name gn37:\n%s", id, tbl)
			}
		}
	}
}
