package inspect

import (
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"os"
	"strings"
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
	return pageTemplate.Execute(w, struct {
		R       *Report
		Text    string
		Data    template.JS
		ChartJS template.JS
	}{r, r.textString(), template.JS(data), template.JS(chartJS)})
}

func (r *Report) textString() string {
	var b strings.Builder
	_ = r.WriteText(&b)
	return b.String()
}

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"f":    func(v Value, p int) string { return f(v, p) },
	"join": strings.Join,
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:">
<link rel="icon" href="data:,">
<title>gym-otel-spank inspect: {{.R.Dir}}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
.trouble { background: #fff0f0; border: 1px solid #d66; padding: .5em 1em; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(480px, 1fr)); gap: 1em; }
.chart { border: 1px solid #ddd; padding: .5em; height: 280px; position: relative; }
table { border-collapse: collapse; } td, th { padding: 2px 8px; border-bottom: 1px solid #eee; text-align: right; }
td:first-child, th:first-child, td.l, th.l { text-align: left; }
pre { background: #f6f6f6; padding: 1em; overflow-x: auto; font-size: 12px; }
</style></head>
<body>
<h1>{{.R.Dir}}</h1>
{{if .R.Trouble}}<div class="trouble" id="trouble">{{range .R.Trouble}}<p>{{.}}</p>{{end}}</div>{{end}}
<p>{{range $k, $v := .R.Job.Identity}}<b>{{$k}}</b> {{join $v ", "}} &nbsp; {{end}}</p>
<p>{{if not .R.Job.Start.IsZero}}{{.R.Job.Start.Format "2006-01-02 15:04:05"}} .. {{.R.Job.End.Format "15:04:05"}} UTC ({{f .R.Job.DurationSeconds 1}} s) on {{join .R.Job.Nodes ", "}}{{end}}</p>
<h2>Charts</h2>
<div class="charts" id="charts"></div>
<h2>Spans by total time</h2>
<table id="spans"><tr><th>name</th><th class="l">producer</th><th>count</th><th>total ms</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>max ms</th><th>errors</th></tr>
{{range .R.Spans.ByName}}<tr><td>{{.Name}}</td><td class="l">{{.Producer}}</td><td>{{f .Duration.Count 0}}</td><td>{{printf "%.1f" .TotalMs}}</td><td>{{f .Duration.P50 1}}</td><td>{{f .Duration.P90 1}}</td><td>{{f .Duration.P99 1}}</td><td>{{f .Duration.Max 1}}</td><td>{{.Errors}}</td></tr>
{{end}}</table>
{{if .R.Spans.SpanMetrics}}<h2>Span metrics</h2>
<table id="spanmetrics"><tr><th>span name</th><th>calls</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th></tr>
{{range .R.Spans.SpanMetrics}}<tr><td>{{.Name}}</td><td>{{f .Calls 0}}</td><td>{{f .Duration.P50 1}}</td><td>{{f .Duration.P90 1}}</td><td>{{f .Duration.P99 1}}</td></tr>
{{end}}</table>{{end}}
<h2>Report</h2>
<pre id="text">{{.Text}}</pre>
<script>{{.ChartJS}}</script>
<script type="application/json" id="report-data">{{.Data}}</script>
<script>
(function () {
  const R = JSON.parse(document.getElementById('report-data').textContent);
  const box = document.getElementById('charts');
  const pad = n => String(n).padStart(2, '0');
  const hms = ms => { const d = new Date(ms); return pad(d.getUTCHours()) + ':' + pad(d.getUTCMinutes()) + ':' + pad(d.getUTCSeconds()); };
  const palette = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
  let drawn = 0;
  function add(id, title, type, datasets, opts) {
    if (!datasets.length || datasets.every(d => !d.data.length)) return;
    const div = document.createElement('div'); div.className = 'chart';
    const c = document.createElement('canvas'); c.id = id; div.appendChild(c); box.appendChild(div);
    datasets.forEach((d, i) => { d.borderColor = d.backgroundColor = palette[i % palette.length]; d.pointRadius = 0; d.borderWidth = 1.5; });
    const time = type === 'line';
    new Chart(c, {
      type: type,
      data: { labels: opts && opts.labels, datasets: datasets },
      options: Object.assign({
        animation: false, responsive: true, maintainAspectRatio: false, parsing: time ? false : undefined,
        plugins: { title: { display: true, text: title } },
        scales: time ? { x: { type: 'linear', ticks: { callback: hms, maxTicksLimit: 8 } }, y: { beginAtZero: true } } : { y: { beginAtZero: true } }
      }, opts && opts.options)
    });
    drawn++;
  }
  const xy = pts => (pts || []).map(p => ({ x: p[0], y: p[1] }));
  const srvName = m => m.node + (m.producer ? ' ' + m.producer : '') + (m.model ? ' ' + m.model : '');
  const servers = (R.model_servers || []).filter(m => m.node !== '(all)');
  add('chart-throughput', 'generation tokens/s', 'line', servers.map(m => ({ label: srvName(m), data: xy(m.generation_tokens_per_second_over_time) })));
  add('chart-queue', 'requests running / waiting', 'line', [].concat(
    servers.map(m => ({ label: 'running ' + srvName(m), data: xy(m.running_over_time) })),
    servers.map(m => ({ label: 'waiting ' + srvName(m), data: xy(m.waiting_over_time) }))));
  add('chart-kvcache', 'KV-cache use (fraction)', 'line', servers.map(m => ({ label: srvName(m), data: xy(m.kv_cache_over_time) })));
  add('chart-gpu', 'GPU utilisation % per node and GPU', 'line', (R.gpus || []).map(g => ({ label: g.node + ' gpu ' + g.gpu, data: xy(g.util_over_time) })));
  const rr = R.gym && R.gym.rollout_rate || {};
  add('chart-rollouts', 'rollouts/s', 'line', Object.keys(rr).sort().map(n => ({ label: n, data: xy(rr[n]) })));
  function hist(id, title, key) {
    servers.forEach((m, i) => {
      const b = m[key]; if (!b || !b.counts || !b.counts.length) return;
      const labels = b.counts.map((_, j) => j < b.bounds.length ? '<= ' + b.bounds[j] : '> ' + b.bounds[b.bounds.length - 1]);
      add(id + '-' + i, title + ' (s): ' + srvName(m), 'bar', [{ label: 'requests', data: b.counts }], { labels: labels });
    });
  }
  hist('chart-e2e', 'e2e latency', 'e2e_buckets');
  hist('chart-ttft', 'time to first token', 'ttft_buckets');
  document.body.dataset.charts = String(drawn);
})();
</script>
</body></html>
`))
