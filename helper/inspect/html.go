package inspect

import (
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
)

// ChartJSPaths are where Debian's libjs-chart.js puts the UMD build of
// Chart.js that WriteHTML inlines, in the order tried.
var ChartJSPaths = []string{
	"/usr/share/javascript/chart.js/chart.umd.min.js",
	"/usr/share/javascript/chart.js/chart.min.js",
	"/usr/share/javascript/chart.js/Chart.min.js",
}

// ChartJSEnv names the environment variable a site can set to the Chart.js
// file when it is not where Debian puts it.
const ChartJSEnv = "GYM_OTEL_CHARTJS"

// LoadChartJS reads Chart.js (its UMD build) from path, or when path is
// empty from $GYM_OTEL_CHARTJS, else from the first of ChartJSPaths that
// exists. The error names the paths tried and the package, variable and
// flag that fix it.
func LoadChartJS(path string) ([]byte, error) {
	what := "--chartjs "
	if path == "" && os.Getenv(ChartJSEnv) != "" {
		path, what = os.Getenv(ChartJSEnv), ChartJSEnv+"="
	}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s%s: %w", what, path, err)
		}
		if !strings.Contains(string(b[:min(len(b), 4096)]), "Chart.js") {
			return nil, fmt.Errorf("%s%s: not Chart.js (no \"Chart.js\" banner in its first 4 KiB)", what, path)
		}
		return b, nil
	}
	for _, p := range ChartJSPaths {
		if b, err := os.ReadFile(p); err == nil {
			return b, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("chart.js: %w", err)
		}
	}
	return nil, fmt.Errorf("--html needs Chart.js and found none at %s: install the package libjs-chart.js (Debian), or give --chartjs FILE or set %s=FILE (Chart.js 3 or 4, its UMD build chart.min.js or chart.umd.min.js)",
		strings.Join(ChartJSPaths, ", "), ChartJSEnv)
}

// WriteHTML writes the report as one self-contained HTML page: the
// figures as tables, and charts (throughput, queue and KV cache per model
// server, GPU use per node and GPU, rollout rate, latency histograms)
// drawn by chartJS, which is inlined with the report's data. The page
// loads nothing at view time (its Content-Security-Policy allows no
// fetch at all).
func (r *Report) WriteHTML(w io.Writer, chartJS []byte) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	text := r.textString()
	// Past maxPhaseNodesShown nodes the text aggregates the phases over
	// the nodes: the page shows that block, and the table of every node's
	// phases folded under it.
	phaseAgg := ""
	if sec := textSections(text, "Slurm phases"); strings.Contains(sec, "each phase over the nodes") {
		phaseAgg = sec
	}
	return pageTemplate().Execute(w, struct {
		R               *Report
		Text            string
		Data            template.JS
		ChartJS         template.JS
		PhaseRows       []phaseRow
		Origin          string
		Tables          map[string]aggTable
		PhaseAgg        string
		AggAfter        int
		PhaseNodesShown int
		GymTelemetry    string
	}{r, text, template.JS(data), template.JS(chartJS), r.phaseRows(), r.phaseOrigin().Format("2006-01-02 15:04:05.000"), r.htmlTables(), phaseAgg, maxChartSeries, maxPhaseNodesShown, r.gymTelemetryText()})
}

// maxChartSeries is the most series of one kind a chart of the page
// draws one by one (one line a node, server or GPU); past it the chart
// draws their median and min-max band over time and the outliers.
const maxChartSeries = 6

// phaseRow is one row of the page's table of Slurm phases.
type phaseRow struct {
	Node, Phase, Start, End, Duration, Note string
	Error                                   bool
}

// phaseRows are the phases as the page's table shows them (times in s
// since the first phase's start, "?" where not known).
func (r *Report) phaseRows() []phaseRow {
	origin := r.phaseOrigin()
	var rows []phaseRow
	for _, np := range r.Phases {
		node := np.Node
		if np.Link != "" {
			node += " (link " + np.Link + ")"
		}
		for _, p := range np.Phases {
			row := phaseRow{Node: node, Phase: strings.TrimSpace(phaseLabel(p)), Start: "?", End: "?", Duration: "?",
				Note: phaseNote(p, origin), Error: p.Error != "" && p.End != nil}
			if p.Start != nil {
				row.Start = offset(p.SpanStart, origin)
			}
			if p.End != nil {
				row.End = offset(p.SpanEnd, origin)
			}
			if p.DurationSeconds.Known() {
				row.Duration = f(p.DurationSeconds, 3)
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// gymTelemetryText is the text report's lines of Gym's attributed
// telemetry, start-up and newer names included ("" when there is none),
// which the page shows as they are.
func (r *Report) gymTelemetryText() string {
	if r.Gym.Telemetry.Empty() {
		return ""
	}
	var b strings.Builder
	(&textOut{w: &b}).gymTelemetryLines(r.Gym)
	return b.String()
}

func (r *Report) textString() string {
	var b strings.Builder
	_ = r.WriteText(&b)
	return b.String()
}

// pageTemplate is the page, parsed on its first use (not at the start
// of every program that links this package: the supervisor does).
var pageTemplate = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("page").Funcs(template.FuncMap{
		"f":                func(v Value, p int) string { return f(v, p) },
		"pct":              func(v Value) string { return pct(v) },
		"q":                quantOrNot,
		"dur":              func(v Value) string { return dur(v) },
		"sub":              func(a, b Value) Value { return a - b },
		"elapsed":          elapsed,
		"deref":            func(p *int) int { return *p },
		"dec":              func(i int) int { return i - 1 },
		"join":             strings.Join,
		"hostlist":         slurm.CompressHostlist,
		"texts":            Texts,
		"textForms":        textForms,
		"foldSharing":      foldSharing,
		"foldReasons":      foldNodeReasons,
		"hostSources":      hostSources,
		"hostAttributions": hostAttributions,
		"s3":               secs3,
	}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:">
<link rel="icon" href="data:,">
<title>gym-otel-spank inspect: {{.R.Dir}}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
.summary { display: grid; grid-template-columns: repeat(auto-fill, minmax(170px, 1fr)); gap: .6em; margin: 1em 0; }
.fig { border: 1px solid #ddd; border-radius: 4px; padding: .5em .8em; }
.fig b { display: block; font-size: 1.6em; } .fig span { color: #555; font-size: .9em; }
.delivery { padding: .6em 1em; border-radius: 4px; font-weight: 600; }
.ok { background: #eef8ee; border: 1px solid #6a6; } .lost { background: #fff0f0; border: 1px solid #d66; } .unknown { background: #fff8e6; border: 1px solid #cb6; }
.outcome { padding: .4em 1em; border-radius: 4px; border: 1px solid #ccc; } .outcome p { margin: .3em 0; }
.trouble { background: #fff0f0; border: 1px solid #d66; padding: .5em 1em; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(480px, 1fr)); gap: 1em; }
.chartbox { border: 1px solid #ddd; padding: .5em; }
.chart { height: 280px; position: relative; }
.legend { font-size: 12px; line-height: 1.5; margin-top: .3em; max-height: 9em; overflow-y: auto; }
.legend span { display: inline-block; margin-right: 1em; white-space: nowrap; }
.legend i { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: -1px; border: 1px solid #0003; }
table { border-collapse: collapse; } td, th { padding: 2px 8px; border-bottom: 1px solid #eee; text-align: right; }
td:first-child, th:first-child, td.l, th.l { text-align: left; }
pre { background: #f6f6f6; padding: 1em; overflow-x: auto; font-size: 12px; }
.absent { color: #666; }
tr.agg td { background: #f4f7fb; } tr.outlier td { background: #fff4e0; }
</style></head>
<body>
<h1>{{.R.Dir}}</h1>
{{with .R.Outcome}}<section id="outcome" class="outcome {{.DeliveryState}}">
<p><b id="outcome-state">{{if .JobID}}Job {{.JobID}}: {{end}}{{.State}}{{if .ExitCode}}, exit code {{deref .ExitCode}}{{end}}{{if .Signal}}, signal {{deref .Signal}}{{end}}</b>
<span class="absent">({{if eq .StateFrom "derived"}}derived: {{.StateWhy}}{{else if eq .StateFrom "unknown"}}{{.StateWhy}}{{else}}sacct{{end}}{{if .Sacct}}; sacct {{.Sacct}}{{end}})</span></p>
<p id="outcome-elapsed">Elapsed {{if .ElapsedSeconds.Known}}{{elapsed .ElapsedSeconds}} ({{.ElapsedFrom}}){{else}}unknown ({{.ElapsedWhy}}){{end}}{{if .QueueWaitSeconds.Known}}, after a queue wait of {{elapsed .QueueWaitSeconds}}{{end}}
on <b id="outcome-nodes">{{.Nodes}} {{if eq .Nodes 1}}node{{else}}nodes{{end}} {{.Hostlist}}</b></p>
<p id="outcome-gym">{{if .Rollouts.Known}}<b>{{f .Rollouts 0}}</b> rollouts, pass rate <b>{{pct .PassRate}}</b>{{if .Verified.Known}} of {{f .Verified 0}} verified{{end}}{{if .RolloutsPerMinute.Known}}, {{f .RolloutsPerMinute 1}} rollouts per minute{{end}}{{else}}No rollouts in the files.{{end}}</p>
</section>{{end}}
<section id="summary">
<p>{{if not .R.Job.Start.IsZero}}{{.R.Job.Start.Format "2006-01-02 15:04:05"}} .. {{.R.Job.End.Format "15:04:05"}} UTC ({{f .R.Job.DurationSeconds 1}} s) on {{.R.Outcome.Hostlist}}{{end}}
{{range $k, $v := .R.Job.Identity}} &nbsp; <b>{{$k}}</b> {{if eq $k "host.name"}}{{hostlist (texts $v)}}{{else}}{{join (textForms $v) ", "}}{{end}}{{end}}</p>
{{with .R.Summary}}<div class="delivery {{.DeliveryState}}" id="delivery">Backend: {{.Delivery}}</div>
<div class="summary">
<div class="fig" id="sum-rollouts"><b>{{f .Rollouts 0}}</b><span>rollouts{{if not .Rollouts.Known}} (no gym.rollout spans or histogram){{end}}</span></div>
<div class="fig" id="sum-pass"><b>{{pct .PassRate}}</b><span>pass rate{{if .Verified.Known}} of {{f .Verified 0}} verified{{else}} (no verify results){{end}}</span></div>
<div class="fig" id="sum-errors"><b>{{.ErrorSpans}} / {{.ErrorLogs}}</b><span>error spans / error log records</span></div>
{{if $.R.Phases}}<div class="fig" id="sum-firstrollout"><b>{{if $.R.FirstRollout.TotalSeconds.Known}}{{dur $.R.FirstRollout.TotalSeconds}}{{else}}-{{end}}</b><span>{{if $.R.FirstRollout.TotalSeconds.Known}}from the {{$.R.FirstRollout.TotalFrom}} to the first rollout{{else}}to the first rollout (not known: see "Submit to first rollout"){{end}}</span></div>
{{end}}<div class="fig" id="sum-throughput"><b>{{if .Throughput}}{{f $.R.Gym.RolloutsPerMinute 1}}{{else}}-{{end}}</b><span>{{if .Throughput}}rollouts per minute: {{f $.R.Gym.RolloutsCounted 0}} in {{dur $.R.Gym.RolloutsWindowSeconds}}{{else}}rollouts per minute (no rollouts with a time span){{end}}</span></div>
</div>{{end}}
{{if .R.Trouble}}<div class="trouble" id="trouble">{{range .R.Trouble}}<p>{{.}}</p>{{end}}</div>{{end}}
{{range .R.Absent}}<p class="absent">{{.Section}}: {{.Why}} ({{.Detail}})</p>{{end}}
</section>
<h2>Charts</h2>
<p class="absent">x: time since the submit (the first phase's start; else since the job's first item); a series of few points is drawn with its points. Past {{.AggAfter}} series a chart draws the median and the min-max band over the nodes, and names the outliers (a series whose mean is far from the others').</p>
<div class="charts" id="charts"></div>
{{if .GymTelemetry}}<h2>Gym telemetry</h2>
<p class="absent">Gym's attributed instruments, start-up spans, token capture, sandboxes and connection pool, as the text report gives them.</p>
<pre id="gym-telemetry">{{.GymTelemetry}}</pre>{{end}}
{{if .R.Phases}}<h2>Submit to first rollout</h2>
<table id="firstrollout"><tr><th class="l">part</th><th>seconds</th></tr>
{{range .R.FirstRollout.Parts}}<tr><td>{{if .Within}}&nbsp;&nbsp;{{end}}{{.Name}}</td><td>{{if .Seconds.Known}}{{printf "%.3f" .Seconds}}{{if eq .Precision "1s"}} (whole seconds){{end}}{{else}}-{{end}}</td></tr>
{{end}}<tr><td><b>submit to first rollout</b></td><td><b>{{if .R.FirstRollout.TotalSeconds.Known}}{{printf "%.3f" .R.FirstRollout.TotalSeconds}}{{if ne .R.FirstRollout.TotalFrom "submit"}} (from the {{.R.FirstRollout.TotalFrom}}){{end}}{{else}}-{{end}}</b></td></tr></table>
{{range .R.FirstRollout.Why}}<p class="absent">{{.}}</p>{{end}}
<h2>Slurm phases</h2>
<p class="absent">Seconds since {{.Origin}} UTC; ? where the node did not know the time (the span was cut at the drain, or started at the supervisor's start).</p>
{{if .PhaseAgg}}<pre id="phases-agg">{{.PhaseAgg}}</pre>
<details id="phases-all"><summary>every node's phases ({{len .PhaseRows}} rows)</summary>{{end}}
<table id="phases"><tr><th class="l">node</th><th class="l">phase</th><th>start</th><th>end</th><th>duration (s)</th><th class="l">note</th></tr>
{{range .PhaseRows}}<tr><td>{{.Node}}</td><td class="l">{{if .Error}}<b>{{.Phase}}</b>{{else}}{{.Phase}}{{end}}</td><td>{{.Start}}</td><td>{{.End}}</td><td>{{.Duration}}</td><td class="l">{{.Note}}</td></tr>
{{end}}</table>{{if .PhaseAgg}}</details>{{end}}{{end}}
{{if .R.TraceTree.Runs}}<h2>Trace tree</h2>
<p class="absent">Job, step, process, rollouts: each process whose root span is a child of its step's span (from TRACEPARENT), and its rollouts by span link or, without one, by the process's resource.</p>
<table id="tracetree"><tr><th class="l">node</th><th class="l">step</th><th class="l">process</th><th class="l">producer</th><th>seconds</th><th>rollouts</th><th>by link</th><th>by resource</th></tr>
{{range .R.TraceTree.Runs}}{{range .Steps}}{{$st := .}}{{range .Processes}}<tr><td>{{$st.Node}}</td><td class="l">{{$st.Step}}</td><td class="l">{{.Name}}</td><td class="l">{{.Producer}}</td><td>{{printf "%.1f" (.End.Sub .Start).Seconds}}</td><td>{{.Rollouts}}</td><td>{{.Linked}}</td><td>{{.ByResource}}</td></tr>
{{end}}{{end}}{{end}}</table>
<p class="absent">{{.R.TraceTree.Rollouts}} rollouts: {{.R.TraceTree.Linked}} by link, {{.R.TraceTree.ByResource}} by resource, {{.R.TraceTree.Unplaced}} not placed.</p>{{end}}
{{if .R.Cgroups}}<h2>Cgroups</h2>
<p class="absent">From the producer cgroup: totals since each group was made; "not kept" where the node does not keep the figure (the reason is in the last column).</p>
{{template "agg" index .Tables "cgroups"}}{{end}}
{{if .R.ModelServers}}<h2>Model servers</h2>
{{template "agg" index .Tables "servers"}}{{end}}
{{if .R.Routers}}<h2>Routers (vllm-router)</h2>
<table id="routers"><tr><th>router</th><th>requests routed</th><th class="l">stage</th><th class="l">worker</th><th>requests</th></tr>
{{range .R.Routers}}<tr><td>{{.Node}} {{.Producer}}</td><td>{{f .Requests 0}}</td><td></td><td></td><td></td></tr>
{{range .Workers}}<tr><td></td><td></td><td class="l">{{.Stage}}</td><td class="l">{{.Worker}}</td><td>{{f .Requests 0}}</td></tr>
{{end}}{{end}}</table>{{end}}
{{if .R.GPUs}}<h2>GPUs</h2>
{{template "agg" index .Tables "gpus"}}
{{if .R.GPUSharing}}<p id="gpu-sharing">Not the job's alone:</p><ul>{{range foldSharing .R.GPUSharing}}<li>{{.}}</li>{{end}}</ul>{{end}}{{end}}
{{with .R.Energy}}{{if ne .Why "` + WhyNoGPUs + `"}}<h2>Energy</h2>
<table id="energy">{{if .NotAttributable}}<tr><td>energy</td><td class="l">` + WhyNotAttributable + `: a shared or MIG-partitioned GPU's power is not the job's alone</td></tr>
{{with .Estimate}}{{if .Joules.Known}}<tr><td>estimate</td><td class="l">{{f .Joules 1}} J, AN ESTIMATE by the {{.Method}}; {{if .Verdict.Trusted}}trusted{{else}}not trusted: {{range .Verdict.Why}}{{.}}; {{end}}{{end}}</td></tr>{{end}}{{end}}
{{else if not .Joules.Known}}<tr><td>energy</td><td class="l">- ({{.Why}})</td></tr>
{{else}}<tr><td>energy</td><td class="l">{{f .Joules 1}} J over {{dur .WindowSeconds}}, {{.GPUs}} GPU(s), from {{.Source}}</td></tr>
<tr><td>per 1,000 generation tokens</td><td class="l">{{if .JoulesPer1kTokens.Known}}{{f .JoulesPer1kTokens 2}} J ({{f .GenerationTokens 0}} tokens, vllm:generation_tokens_total){{else}}- (no vllm:generation_tokens_total){{end}}</td></tr>
<tr><td>per rollout</td><td class="l">{{if .JoulesPerRollout.Known}}{{f .JoulesPerRollout 2}} J ({{f .Rollouts 0}} rollouts, {{.RolloutsSource}}){{else}}- (no rollouts counted){{end}}</td></tr>
{{end}}</table>{{end}}{{end}}
{{if .R.StepEnergy}}<h2>Energy per step</h2>
{{template "agg" index .Tables "step-energy"}}{{end}}
{{if .R.HostEnergy}}<h2>Host energy ({{hostSources .R.HostEnergy}}; the node's)</h2>
{{range hostAttributions .R.HostEnergy}}<p class="host-attribution">{{.}}</p>{{end}}
{{template "agg" index .Tables "host-energy"}}{{end}}
{{if .R.RoleEnergy}}<h2>Energy per role</h2>
<table id="role-energy"><tr><th class="l">role</th><th class="l">step</th><th class="l">nodes</th><th>J</th><th>generation tokens</th><th>J per 1,000 tokens</th><th class="l">from</th><th class="l">verdict</th></tr>
{{range .R.RoleEnergy}}<tr><td class="l">{{.Role}}</td><td class="l">{{.Step}}</td><td class="l">{{hostlist .Nodes}}</td><td>{{f .Joules 1}}</td><td>{{f .GenerationTokens 0}}</td><td>{{f .JoulesPer1kTokens 2}}</td><td class="l">{{.Source}}</td><td class="l">{{if .Verdict.Trusted}}trusted{{else}}not trusted: {{range (foldReasons .Verdict .Nodes).Why}}{{.}}; {{end}}{{end}}{{with .Estimate}}{{if .Joules.Known}} AN ESTIMATE: {{f .Joules 1}} J by the {{.Method}}{{end}}{{end}}</td></tr>
{{end}}</table>{{end}}
{{if .R.Hosts}}<h2>Hosts</h2>
{{template "agg" index .Tables "hosts"}}{{end}}
{{if .R.Spans.ByName}}<h2>Spans by total time</h2>
<table id="spans"><tr><th>name</th><th class="l">producer</th><th>count</th><th>total ms</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>max ms</th><th>errors</th></tr>
{{range .R.Spans.ByName}}<tr><td>{{.Name}}</td><td class="l">{{.Producer}}</td><td>{{f .Duration.Count 0}}</td><td>{{printf "%.1f" .TotalMs}}</td><td>{{f .Duration.P50 1}}</td><td>{{f .Duration.P90 1}}</td><td>{{f .Duration.P99 1}}</td><td>{{f .Duration.Max 1}}</td><td>{{.Errors}}</td></tr>
{{end}}</table>{{end}}
{{if .R.Spans.SpanMetrics}}<h2>Span metrics</h2>
<table id="spanmetrics"><tr><th>span name</th><th>calls</th><th class="l">duration (ms)</th><th class="l">from</th></tr>
{{range .R.Spans.SpanMetrics}}<tr><td>{{.Name}}</td><td>{{f .Calls 0}}{{if .CallsNote}} <small>(note: {{.CallsNote}})</small>{{end}}</td><td class="l">{{q .Duration 1}}</td><td class="l">{{if eq .DurationFrom "spans"}}{{.Spans}} raw spans{{else}}the connector's buckets{{end}}</td></tr>
{{end}}</table>{{end}}
{{define "agg"}}{{if .Aggregated}}<p class="absent">{{.N}} rows: each column's min, median and max (the nodes of the min and of the max in brackets), then the rows far from the median (outliers, with the columns they are far in); every row below, folded.</p>
{{end}}<table id="{{.ID}}"><tr><th class="l">{{.First}}</th>{{range .Heads}}<th{{if .Left}} class="l"{{end}}>{{.Head}}</th>{{end}}</tr>
{{range .Rows}}<tr{{if .Class}} class="{{.Class}}"{{end}}>{{range $i, $c := .Cells}}<td{{if and $i (index $.Heads (dec $i)).Left}} class="l"{{end}}>{{$c}}</td>{{end}}</tr>
{{end}}</table>{{if .Aggregated}}
<details id="{{.ID}}-all"><summary>all {{.N}} rows</summary><table><tr><th class="l">{{.First}}</th>{{range .Heads}}<th{{if .Left}} class="l"{{end}}>{{.Head}}</th>{{end}}</tr>
{{range .All}}<tr>{{range $i, $c := .Cells}}<td{{if and $i (index $.Heads (dec $i)).Left}} class="l"{{end}}>{{$c}}</td>{{end}}</tr>
{{end}}</table></details>{{end}}{{end}}
<h2>Report</h2>
<pre id="text">{{.Text}}</pre>
<script>{{.ChartJS}}</script>
<script type="application/json" id="report-data">{{.Data}}</script>
<script>
(function () {
  const R = JSON.parse(document.getElementById('report-data').textContent);
  const charts = document.getElementById('charts');
  // One time origin for the whole page: the phases' (the first phase's
  // start, the submit where the queue wait is known; the table and the
  // phase chart count from it), else the job's first item. The metric
  // charts span the job's items, from x0 (the first item, in s since the
  // origin) to x0 + span, so that a rise lines up with the phase that
  // caused it.
  let po = Infinity;
  (R.phases || []).forEach(n => n.phases.forEach(p => { po = Math.min(po, Date.parse(p.span_start)); }));
  const first = R.job && R.job.start ? Date.parse(R.job.start) : 0;
  const t0 = Number.isFinite(po) ? po : first;
  const x0 = first && t0 ? (first - t0) / 1000 : 0;
  const span = R.job && R.job.duration_seconds || 0;
  const originText = Number.isFinite(po) ? 'the first phase\'s start' : 'the job\'s first item';
  const pad = n => String(Math.floor(n)).padStart(2, '0');
  // Seconds since the origin: "12.5 s" for a short job, else m:ss or
  // h:mm:ss.
  const since = s => {
    if (x0 + span < 120) return (Math.round(s * 10) / 10) + ' s';
    s = Math.round(s); // a tick at 29.999999 is 0:30, not 0:29
    const h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60, sec = s % 60;
    return h > 0 ? h + ':' + pad(m) + ':' + pad(sec) : m + ':' + pad(sec);
  };
  // A tick step that is a round time: about 6 ticks over the job.
  const step = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 21600, 43200, 86400]
    .find(s => span / s <= 8) || 86400 * Math.ceil(span / 86400 / 8);
  const palette = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
  const DESIGN = 280; // px: the height of every metric chart's plot box, whatever its legend
  const AGG = {{.AggAfter}};
  const facts = [];
  let drawn = 0;
  const med = v => { const a = v.slice().sort((x, y) => x - y), n = a.length; return n % 2 ? a[(n - 1) / 2] : (a[n / 2 - 1] + a[n / 2]) / 2; };
  // One group of series (one a node, server or GPU): as they are up to
  // AGG of them; past it their median and min-max band on a time grid
  // (each series' last point at each grid time), and the outliers (a
  // series whose mean is more than three scaled median absolute
  // deviations and 20% from the median of the series' means; three at
  // most, the farthest) drawn on their own, named.
  function group(name, series, color) {
    series = series.filter(s => s.data.length);
    const pre = name ? name + ' ' : '';
    if (series.length <= AGG) return { sets: series.map(s => ({ label: pre + s.label, data: s.data })), aggregated: 0, outliers: [] };
    // A series is compared with its peers (the same GPU index on the
    // other nodes; else every series of the group).
    const mean = s => s.data.reduce((a, p) => a + p.y, 0) / s.data.length;
    const means = series.map(mean), peers = {};
    series.forEach((s, i) => { (peers[s.peer || ''] = peers[s.peer || ''] || []).push(means[i]); });
    const ref = {};
    Object.keys(peers).forEach(k => { const m = med(peers[k]); ref[k] = { m: m, mad: med(peers[k].map(v => Math.abs(v - m))) }; });
    const dev = i => Math.abs(means[i] - ref[series[i].peer || ''].m);
    const out = series.map((s, i) => i).filter(i => { const r = ref[series[i].peer || ''], d = dev(i); return d > 3 * 1.4826 * r.mad && d > 0.2 * Math.abs(r.m) && d > 1e-9; })
      .sort((a, b) => dev(b) - dev(a)).slice(0, 3);
    const m = med(means);
    const rest = series.filter((s, i) => !out.includes(i));
    let lo = Infinity, hi = -Infinity, pts = 0;
    rest.forEach(s => { lo = Math.min(lo, s.data[0].x); hi = Math.max(hi, s.data[s.data.length - 1].x); pts = Math.max(pts, s.data.length); });
    const bins = Math.max(2, Math.min(240, pts)), w = (hi - lo) / (bins - 1) || 1;
    const mn = [], md = [], mx = [];
    for (let b = 0; b < bins; b++) {
      const at = lo + b * w, vs = [];
      rest.forEach(s => {
        const d = s.data;
        if (d[0].x > at + w / 2 || d[d.length - 1].x < at - w / 2) return;
        let l = 0, h = d.length - 1; // the last point at or before at + w/2
        while (l < h) { const k = (l + h + 1) >> 1; if (d[k].x <= at + w / 2) l = k; else h = k - 1; }
        vs.push(d[l].y);
      });
      if (!vs.length) continue;
      mn.push({ x: at, y: Math.min(...vs) }); md.push({ x: at, y: med(vs) }); mx.push({ x: at, y: Math.max(...vs) });
    }
    const fmt = v => Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 1 ? v.toFixed(1) : v.toFixed(3);
    const sets = [
      { label: pre + 'max of ' + rest.length, data: mx, fill: '+1', band: color, borderWidth: 0.5 },
      { label: pre + 'min of ' + rest.length, data: mn, band: color, borderWidth: 0.5 },
      { label: pre + 'median of ' + rest.length + (out.length ? ' (outliers apart)' : ''), data: md, color: color, borderWidth: 2 },
    ].concat(out.map(i => ({ label: pre + 'outlier ' + series[i].label + ' (mean ' + fmt(means[i]) + ', median ' + fmt(ref[series[i].peer || ''].m) + (series[i].peer ? ' of ' + series[i].peer : '') + ')', data: series[i].data, outlier: true })));
    return { sets: sets, aggregated: rest.length, outliers: out.map(i => series[i].label) };
  }
  // The legend below the chart's box, never in it: the plot keeps its
  // height whatever the number of series.
  function legend(div, datasets) {
    const l = document.createElement('div'); l.className = 'legend';
    datasets.forEach(d => {
      if (d.data.every(v => v === null)) return;
      const sp = document.createElement('span'), sw = document.createElement('i');
      sw.style.background = d.legendColor || d.backgroundColor || d.borderColor;
      sp.appendChild(sw); sp.appendChild(document.createTextNode(d.label)); l.appendChild(sp);
    });
    div.appendChild(l);
    return l;
  }
  function add(id, title, type, groups, opts) {
    // groups: one or more groups of series; a plain list of datasets is
    // one group drawn as it is.
    if (groups.length && !groups[0].sets) groups = [{ sets: groups, aggregated: 0, outliers: [] }];
    let datasets = [], aggregated = 0, outliers = [];
    groups.forEach(g => { datasets = datasets.concat(g.sets); aggregated += g.aggregated; outliers = outliers.concat(g.outliers); });
    datasets = datasets.filter(d => d.data.length);
    if (!datasets.length) return;
    const box = document.createElement('div'); box.className = 'chartbox';
    const div = document.createElement('div'); div.className = 'chart'; div.style.height = DESIGN + 'px';
    const c = document.createElement('canvas'); c.id = id; div.appendChild(c); box.appendChild(div); charts.appendChild(box);
    const counts = opts && opts.counts;
    let k = 0;
    datasets.forEach(d => {
      const col = d.band || d.color || (d.outlier ? '#d62728' : palette[k++ % palette.length]);
      d.borderColor = col; d.backgroundColor = d.band ? col + '33' : col; d.legendColor = d.band ? col + '66' : col;
      // A sparse series is drawn with its points: one point has no line.
      d.pointRadius = d.data.length === 1 ? 4 : d.data.length <= 60 && !d.band ? 2 : 0;
      d.borderWidth = d.borderWidth || 1.5;
      if (d.outlier) d.borderDash = [6, 3];
      d.clip = 6; // a point on the chart's edge is drawn whole
    });
    const time = type === 'line';
    const y = { beginAtZero: true, ticks: counts ? { precision: 0 } : {} };
    // Bands: shaded spans of x behind the series ([from, to, label]).
    const bands = opts && opts.bands || [];
    const chart = new Chart(c, {
      type: type,
      plugins: bands.length ? [{ id: 'bands', beforeDatasetsDraw: ch => {
        const x = ch.scales.x, a = ch.chartArea, g = ch.ctx;
        g.save();
        bands.forEach((b, i) => {
          const l = Math.max(x.getPixelForValue(b[0]), a.left), r = Math.min(x.getPixelForValue(b[1]), a.right);
          if (r <= l) return;
          g.fillStyle = i % 2 ? 'rgba(255,127,14,0.10)' : 'rgba(31,119,180,0.10)';
          g.fillRect(l, a.top, r - l, a.bottom - a.top);
          g.fillStyle = '#555'; g.font = '10px sans-serif';
          g.fillText(b[2], l + 2, a.top + 10 + 11 * (i % 3));
        });
        g.restore();
      } }] : [],
      data: { labels: opts && opts.labels, datasets: datasets },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false, parsing: time ? false : undefined,
        plugins: { title: { display: true, text: title }, legend: { display: false } },
        scales: time ? { x: { type: 'linear', min: x0, max: span > 0 ? x0 + span : undefined, title: { display: true, text: 'time since ' + originText },
          ticks: { callback: since, stepSize: span >= 8 ? step : undefined, maxTicksLimit: 10 },
          // Ticks at the first item, then at whole steps of the origin's
          // time, then the job's end when it is not near one: Chart.js
          // would count the last steps back from the end (0:00 ... 2:00
          // 2:29 2:59).
          afterBuildTicks: a => {
            if (!(span >= 8)) return;
            const t = [{ value: x0 }], end = x0 + span;
            for (let v = Math.ceil(x0 / step) * step; v <= end + 1e-9; v += step) {
              if (v - x0 > step / 4) t.push({ value: v });
            }
            if (end - t[t.length - 1].value > step / 4) t.push({ value: end });
            a.ticks = t;
          } }, y: y } : { y: y }
      }
    });
    const lg = legend(box, datasets);
    facts.push({ id: id, counts: !!counts, bands: bands.length,
      series: datasets.map((d, i) => ({ points: d.data.length, radius: d.pointRadius, drawn: chart.getDatasetMeta(i).data.length })),
      x: chart.scales.x.ticks.map(t => t.label), y: chart.scales.y.ticks.map(t => t.value),
      x_min: time ? chart.scales.x.min : null, x_origin: time ? new Date(t0).toISOString() : null,
      design_height: DESIGN, box_height: div.getBoundingClientRect().height, plot_height: chart.chartArea.bottom - chart.chartArea.top,
      legend_items: lg.children.length, aggregated: aggregated, outliers: outliers, labels: datasets.map(d => d.label) });
    drawn++;
  }
  const xy = pts => (pts || []).map(p => ({ x: (p[0] - t0) / 1000, y: p[1] }));
  const srvName = m => m.node + (m.producer ? ' ' + m.producer : '') + (m.model ? ' ' + m.model : '');
  const servers = (R.model_servers || []).filter(m => m.node !== '(all)');
  add('chart-throughput', 'generation tokens/s', 'line', [group('', servers.map(m => ({ label: srvName(m), data: xy(m.generation_tokens_per_second_over_time) })), palette[0])]);
  add('chart-queue', 'requests running / waiting', 'line', [
    group('running', servers.map(m => ({ label: srvName(m), data: xy(m.running_over_time) })), palette[0]),
    group('waiting', servers.map(m => ({ label: srvName(m), data: xy(m.waiting_over_time) })), palette[1])], { counts: true });
  add('chart-kvcache', 'KV-cache use (fraction)', 'line', [group('', servers.map(m => ({ label: srvName(m), data: xy(m.kv_cache_over_time) })), palette[0])]);
  add('chart-gpu', 'GPU utilisation % per node and GPU', 'line', [group('', (R.gpus || []).map(g => ({ label: g.node + ' gpu ' + g.gpu, peer: 'gpu ' + g.gpu, data: xy(g.util_over_time) })), palette[2])]);
  // GPU power with each step's window on each node as a band (the energy
  // per step's windows); past AGG windows one band a step, from its
  // earliest start to its latest end over the nodes.
  let stepBands = (R.step_energy || []).filter(e => e.start && e.end)
    .map(e => [(Date.parse(e.start) - t0) / 1000, (Date.parse(e.end) - t0) / 1000, e.node + ' step ' + e.step, e.step]);
  if (stepBands.length > AGG) {
    const by = {}, order = [];
    stepBands.forEach(b => { if (!by[b[3]]) { by[b[3]] = [b[0], b[1], 0]; order.push(b[3]); } const u = by[b[3]]; u[0] = Math.min(u[0], b[0]); u[1] = Math.max(u[1], b[1]); u[2]++; });
    stepBands = order.map(k => [by[k][0], by[k][1], 'step ' + k + ' (' + by[k][2] + ' nodes)']);
  }
  add('chart-power', 'GPU power W per node and GPU' + (stepBands.length ? ', steps as bands' : ''), 'line',
    [group('', (R.gpus || []).map(g => ({ label: g.node + ' gpu ' + g.gpu + (g.gpu_instance ? '/' + g.gpu_instance : ''), peer: 'gpu ' + g.gpu, data: xy(g.power_over_time) })), palette[3])], { bands: stepBands });
  add('chart-load', 'load1 per node', 'line', [group('', (R.hosts || []).map(h => ({ label: h.node, data: xy(h.load1_over_time) })), palette[4])]);
  const ro = R.gym && R.gym.rollouts_over_time || {};
  add('chart-rollouts', 'rollouts completed (gym.rollout.duration_ms count)', 'line', Object.keys(ro).sort().map(n => ({ label: n, data: xy(ro[n]) })), { counts: true });
  // A latency histogram per server; past AGG servers one per set of
  // bucket bounds, the servers' counts summed.
  function hist(id, title, key) {
    const have = servers.filter(m => m[key] && m[key].counts && m[key].counts.length);
    const labels = b => b.counts.map((_, j) => j < b.bounds.length ? '<= ' + b.bounds[j] : '> ' + b.bounds[b.bounds.length - 1]);
    if (have.length <= AGG) {
      have.forEach((m, i) => add(id + '-' + i, title + ' (s): ' + srvName(m), 'bar', [{ label: 'requests', data: m[key].counts }], { labels: labels(m[key]), counts: true }));
      return;
    }
    const sets = {}, order = [];
    have.forEach(m => {
      const k = JSON.stringify(m[key].bounds);
      if (!sets[k]) { sets[k] = { bounds: m[key].bounds, counts: m[key].counts.map(() => 0), n: 0 }; order.push(k); }
      m[key].counts.forEach((c, j) => { sets[k].counts[j] += c; }); sets[k].n++;
    });
    order.forEach((k, i) => add(id + '-' + i, title + ' (s): ' + sets[k].n + ' servers, summed', 'bar', [{ label: 'requests of ' + sets[k].n + ' servers', data: sets[k].counts }], { labels: labels(sets[k]), counts: true }));
  }
  // The Slurm phases per node: a bar from each phase's start to its end,
  // in seconds since the first phase's start. A phase whose start or end
  // the node did not know is drawn as the span was cut (from the
  // supervisor's start, to the drain) in grey, said so in its legend.
  (function () {
    const nodes = R.phases || [];
    const o = t0;
    let last = -Infinity;
    nodes.forEach(n => n.phases.forEach(p => { last = Math.max(last, Date.parse(p.span_end)); }));
    const rows = [], sets = { ok: [], failed: [], unknown: [], spread: [], outlier: [] };
    const label = p => p.name === 'slurm.step' ? 'step ' + p.step : p.name.replace(/^slurm\./, '').replace('_', ' ');
    const kindOf = p => p.start === null || p.end === null ? 'unknown' : p.error ? 'failed' : 'ok';
    const row = (name, bars) => { rows.push(name); Object.keys(sets).forEach(k => sets[k].push(bars[k] || null)); };
    const se = p => { const s = (Date.parse(p.span_start) - o) / 1000, e = (Date.parse(p.span_end) - o) / 1000; return [s, Math.max(e, s)]; };
    const aggregated = nodes.length > {{.PhaseNodesShown}};
    if (!aggregated) {
      nodes.forEach(n => n.phases.slice(0, 40).forEach(p => row(n.node + (n.link ? ' (link ' + n.link + ')' : '') + ' ' + label(p), { [kindOf(p)]: se(p) })));
    } else {
      // Past a few nodes, one row a phase as the text's: from its median
      // start for its median duration (failed or not known where it was
      // on any node), over the spread from the earliest start to the
      // latest end; a node whose phase took over twice the median and 1 s
      // more on a row of its own, named.
      const order = [], by = {};
      nodes.forEach(n => n.phases.forEach(p => { const l = label(p); if (!by[l]) { by[l] = []; order.push(l); } by[l].push({ node: n.node, p: p }); }));
      order.forEach(l => {
        const os = by[l], ss = os.map(x => se(x.p)), durs = os.map(x => x.p.duration_seconds).filter(d => typeof d === 'number');
        const ms = med(ss.map(v => v[0])), md = durs.length ? med(durs) : med(ss.map(v => v[1] - v[0]));
        const kind = os.some(x => kindOf(x.p) === 'failed') ? 'failed' : os.some(x => kindOf(x.p) === 'unknown') ? 'unknown' : 'ok';
        row(l + ' (' + os.length + (os.length === 1 ? ' node: ' + os[0].node : ' nodes') + ')',
          { [kind]: [ms, ms + md], spread: [Math.min(...ss.map(v => v[0])), Math.max(...ss.map(v => v[1]))] });
        os.forEach(x => { const d = x.p.duration_seconds; if (typeof d === 'number' && d > 2 * md && d > md + 1) row(x.node + ' ' + l + ' (outlier: ' + d.toFixed(3) + ' s)', { outlier: se(x.p) }); });
      });
    }
    if (!rows.length) return;
    // The first rollout (the first gym.rollout span's start): a mark on
    // its own row.
    const fr = R.first_rollout && R.first_rollout.first_rollout;
    const marks = rows.map(() => null);
    if (fr) {
      const at = (Date.parse(fr) - o) / 1000;
      rows.push('first rollout' + (R.first_rollout.rollout_node ? ' (' + R.first_rollout.rollout_node + ')' : ''));
      Object.keys(sets).forEach(k => sets[k].push(null));
      marks.push([at, at]);
      last = Math.max(last, Date.parse(fr));
    }
    const pspan = (last - o) / 1000;
    const fmt = s => pspan < 2 ? s.toFixed(2) + ' s' : pspan < 120 ? (Math.round(s * 10) / 10) + ' s'
      : Math.floor(s / 60) + ':' + pad(Math.round(s) % 60);
    const ds = [
      { label: 'earliest start to latest end over the nodes', data: sets.spread, backgroundColor: 'rgba(31,119,180,0.18)', order: 1 },
      { label: aggregated ? 'phase: median start, median duration' : 'phase', data: sets.ok, backgroundColor: '#1f77b4' },
      { label: 'outlier: a node\'s phase over twice the median', data: sets.outlier, backgroundColor: '#ff7f0e' },
      { label: 'failed (exit code or signal)', data: sets.failed, backgroundColor: '#d62728' },
      { label: 'start or end not known: the span as the node cut it', data: sets.unknown, backgroundColor: 'rgba(150,150,150,0.45)', borderColor: '#666', borderWidth: 1 },
      { label: 'first rollout (gym.rollout span start)', data: marks, backgroundColor: '#2ca02c' },
    ].filter(d => d.data.some(v => v !== null));
    ds.forEach(d => { d.minBarLength = 3; d.grouped = false; d.barPercentage = 0.8; });
    const box = document.createElement('div'); box.className = 'chartbox'; box.style.gridColumn = '1 / -1';
    const div = document.createElement('div'); div.className = 'chart';
    const design = 100 + 22 * rows.length;
    div.style.height = design + 'px';
    const c = document.createElement('canvas'); c.id = 'chart-phases'; div.appendChild(c); box.appendChild(div); charts.appendChild(box);
    const chart = new Chart(c, {
      type: 'bar',
      data: { labels: rows, datasets: ds },
      options: {
        indexAxis: 'y', animation: false, responsive: true, maintainAspectRatio: false,
        plugins: { legend: { display: false }, title: { display: true, text: 'Slurm phases ' + (aggregated ? 'over ' + nodes.length + ' nodes' : 'per node') + ' (time since ' + new Date(o).toISOString().replace('T', ' ').replace('Z', ' UTC') + ')' } },
        scales: { x: { type: 'linear', min: 0, title: { display: true, text: 'time since the first phase\'s start' }, ticks: { callback: fmt, maxTicksLimit: 10 } },
          y: { ticks: { autoSkip: false } } }
      }
    });
    facts.push({ id: 'chart-phases', counts: false,
      series: ds.map((d, i) => ({ points: d.data.filter(v => v !== null).length, radius: 1,
        drawn: chart.getDatasetMeta(i).data.filter((el, j) => d.data[j] !== null && Number.isFinite(el.x) && Number.isFinite(el.base)).length })),
      x: chart.scales.x.ticks.map(t => t.label), y: chart.scales.y.ticks.map(t => t.value),
      x_min: chart.scales.x.min, x_origin: new Date(o).toISOString(),
      design_height: design, box_height: div.getBoundingClientRect().height, plot_height: chart.chartArea.bottom - chart.chartArea.top,
      legend_items: legend(box, ds).children.length, aggregated: aggregated ? nodes.length : 0, outliers: [], labels: rows });
    drawn++;
  })();
  hist('chart-e2e', 'e2e latency', 'e2e_buckets');
  hist('chart-ttft', 'time to first token', 'ttft_buckets');
  document.body.dataset.chartFacts = JSON.stringify(facts);
  // Where the outcome is drawn, for a reader's first screen.
  const oc = document.getElementById('outcome');
  document.body.dataset.layout = JSON.stringify({ outcome_top: oc ? oc.getBoundingClientRect().top : -1,
    outcome_bottom: oc ? oc.getBoundingClientRect().bottom : -1, viewport: window.innerHeight,
    charts_top: charts.getBoundingClientRect().top, state: oc ? document.getElementById('outcome-state').textContent : '',
    nodes: oc ? document.getElementById('outcome-nodes').textContent : '' });
  document.body.dataset.charts = String(drawn);
})();
</script>
</body></html>
`))
})
