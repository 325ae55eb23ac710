package inspect

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// The long job of testdata/longjob: what the real collector, run through
// `gym-otel-spank supervise`, wrote for a job of about 3 minutes scraped
// every second (vLLM and dcgm stand-ins, node_exporter) while the Gym
// stand-in ran rollouts of 400 ms under Gym's real names. Its jsonl files
// are kept gzipped; helper/supervise's TestLongJobTestdata regenerates
// them (testdata/longjob/README.md).
const longJobData = "testdata/longjob/otel"

// longJobShown is the job's otel/ dir as the goldens show it: the test
// reads a copy in a temporary dir.
const longJobShown = "/jobs/longjob/otel"

// longJob unpacks testdata/longjob into a temporary job dir and returns
// the job dir and its otel/ dir.
func longJob(t *testing.T) (job, otel string) {
	t.Helper()
	job = t.TempDir()
	otel = filepath.Join(job, "otel")
	if err := os.MkdirAll(otel, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(longJobData)
	if err != nil {
		t.Fatalf("%v (helper/supervise's TestLongJobTestdata writes it)", err)
	}
	for _, e := range ents {
		in, err := os.Open(filepath.Join(longJobData, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var r io.Reader = in
		name := e.Name()
		if strings.HasSuffix(name, ".gz") {
			zr, err := gzip.NewReader(in)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			r, name = zr, strings.TrimSuffix(name, ".gz")
		}
		data, err := io.ReadAll(r)
		in.Close()
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		if err := os.WriteFile(filepath.Join(otel, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return job, otel
}

// buildLongJob builds the long job's report.
func buildLongJob(t *testing.T) (*Report, string) {
	t.Helper()
	job, otel := longJob(t)
	r, err := Build(job)
	if err != nil {
		t.Fatal(err)
	}
	return r, otel
}

// shown replaces the temporary otel/ dir in s by the one the goldens show.
func shown(s, otel string) string { return strings.ReplaceAll(s, otel, longJobShown) }

// checkJSONQuantiles walks a decoded JSON tree and fails for an object
// whose p50, p90, p99 or mean lies above its max or below its min, or
// whose quantile its mean, min and max rule out. It
// returns how many objects with quantiles and a max it checked.
func checkJSONQuantiles(t *testing.T, v any, path string) int {
	t.Helper()
	n := 0
	switch x := v.(type) {
	case map[string]any:
		lo, hasLo := x["min"].(float64)
		hi, hasHi := x["max"].(float64)
		checked := false
		for _, k := range []string{"p50", "p90", "p99", "mean"} {
			q, ok := x[k].(float64)
			if !ok {
				continue
			}
			if hasHi {
				checked = true
				if q > hi+1e-9 {
					t.Errorf("%s: %s %v above max %v", path, k, q, hi)
				}
			}
			if hasLo && q < lo-1e-9 {
				t.Errorf("%s: %s %v below min %v", path, k, q, lo)
			}
		}
		// The mean bounds every quantile too (meanBound): a p-quantile
		// is at most (mean - p*min)/(1-p) and at least
		// (mean - (1-p)*max)/p.
		if mean, ok := x["mean"].(float64); ok {
			for k, p := range map[string]float64{"p50": 0.5, "p90": 0.9, "p99": 0.99} {
				q, ok := x[k].(float64)
				if !ok {
					continue
				}
				if hasLo && q > (mean-p*lo)/(1-p)+1e-6 {
					t.Errorf("%s: %s %v above %v, the most a mean of %v and a min of %v allow", path, k, q, (mean-p*lo)/(1-p), mean, lo)
				}
				if hasHi && q < (mean-(1-p)*hi)/p-1e-6 {
					t.Errorf("%s: %s %v below %v, the least a mean of %v and a max of %v allow", path, k, q, (mean-(1-p)*hi)/p, mean, hi)
				}
			}
		}
		if checked {
			n++
		}
		for k, c := range x {
			n += checkJSONQuantiles(t, c, path+"."+k)
		}
	case []any:
		for i, c := range x {
			n += checkJSONQuantiles(t, c, fmt.Sprintf("%s[%d]", path, i))
		}
	}
	return n
}

// TestLongJobText: the text report of the long job against its golden
// (go test -run TestLongJob -update rewrites it). The figures agree with
// the data: no quantile outside its distribution's min and max, the
// receipt says nothing was lost, every scrape target answered every
// scrape, and the rollout throughput states its window.
func TestLongJobText(t *testing.T) {
	r, otel := buildLongJob(t)
	if n := checkFigures(t, r); n < 10 {
		t.Errorf("only %d distributions checked", n)
	}
	if !r.Job.DurationSeconds.Known() || r.Job.DurationSeconds < 120 {
		t.Errorf("the long job lasted %v s, want minutes", r.Job.DurationSeconds)
	}
	if s := r.Summary; !s.DeliveryOK || !s.Rollouts.Known() || s.Rollouts < 100 || s.Throughput == "" {
		t.Errorf("summary %+v: want every item delivered, hundreds of rollouts and their throughput", s)
	}
	for _, d := range r.Health.Dirs {
		for _, tg := range d.Targets {
			if tg.Scrapes < 100 || tg.Answered != tg.Scrapes {
				t.Errorf("target %s %s: %d scrapes, %d answered: want hundreds, all answered", tg.Job, tg.Instance, tg.Scrapes, tg.Answered)
			}
		}
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	text := shown(b.String(), otel)
	for _, bad := range []string{"NaN", "Inf", "LOST", "FAILED"} {
		if strings.Contains(text, bad) {
			t.Errorf("the text report holds %q", bad)
		}
	}
	golden(t, "longjob/report.golden.txt", text)
}

// TestLongJobJSON: the JSON report of the long job against its golden
// (-update rewrites it); in the JSON itself no p50, p90, p99 or mean lies
// above its max or below its min, and every time series has its hundreds
// of points.
func TestLongJobJSON(t *testing.T) {
	r, otel := buildLongJob(t)
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	var tree any
	if err := json.Unmarshal(raw, &tree); err != nil {
		t.Fatal(err)
	}
	if n := checkJSONQuantiles(t, tree, "report"); n < 10 {
		t.Errorf("only %d distributions with a max in the JSON", n)
	}
	series := 0
	for _, m := range r.ModelServers {
		if m.Node == "(all)" {
			continue
		}
		for name, s := range map[string][]Point{"running": m.RunningOverTime, "kv cache": m.KVCacheOverTime} {
			series++
			if len(s) < 100 {
				t.Errorf("model server %s %s: %d points over time, want hundreds", m.Node, name, len(s))
			}
		}
	}
	for _, g := range r.GPUs {
		series++
		if len(g.UtilOverTime) < 100 {
			t.Errorf("GPU %s %s: %d utilisation points, want hundreds", g.Node, g.GPU, len(g.UtilOverTime))
		}
	}
	if series < 4 {
		t.Errorf("%d time series checked: want a model server's and two GPUs'", series)
	}
	golden(t, "longjob/report.golden.json", shown(string(raw), otel)+"\n")
}

// sinceLabel is an x tick label of a job of minutes: m:ss since its start.
var sinceLabel = regexp.MustCompile(`^(\d+):([0-5]\d)$`)

// TestLongJobHTML: the long job's page in Chromium. It opens on the
// summary; every chart draws every series with all its points; the time
// axes are m:ss since the job's start, from 0:00, increasing, within the
// job; the axes of counts have whole numbers only; the tables after the
// charts hold the figures.
func TestLongJobHTML(t *testing.T) {
	r, _ := buildLongJob(t)
	html, page := writeReportPage(t, r)
	if html == "" {
		return
	}
	at := func(id string) int { return strings.Index(html, `id="`+id+`"`) }
	charts := at("charts")
	for _, id := range []string{"summary", "delivery", "sum-rollouts", "sum-pass", "sum-errors", "sum-throughput"} {
		if p := at(id); p < 0 || p > charts {
			t.Errorf("%s at %d, the charts at %d: the page does not open on its summary", id, p, charts)
		}
	}
	if !strings.Contains(html, `class="delivery ok"`) {
		t.Error("the summary does not say nothing was lost")
	}
	for _, id := range []string{"servers", "gpus", "hosts", "spans", "spanmetrics", "text"} {
		if p := at(id); p < charts {
			t.Errorf("table %s at %d: want it after the charts (%d)", id, p, charts)
		}
	}
	want := []string{"chart-throughput", "chart-queue", "chart-kvcache", "chart-gpu", "chart-load", "chart-rollouts", "chart-e2e-0", "chart-ttft-0"}
	p := testenv.CheckPage(t, page, filepath.Join(filepath.Dir(page), "report.png"), want...)
	var facts []chartFacts
	if err := json.Unmarshal([]byte(testenv.EvalPage(t, page, "chart-facts")), &facts); err != nil {
		t.Fatal(err)
	}
	if len(facts) != len(p.Canvases) || len(facts) < len(want) {
		t.Errorf("%d charts with facts, %d canvases, want at least %v", len(facts), len(p.Canvases), want)
	}
	span := float64(r.Job.DurationSeconds)
	for _, c := range facts {
		if len(c.Series) == 0 {
			t.Errorf("%s: no series", c.ID)
		}
		for i, s := range c.Series {
			if s.Points == 0 || s.Drawn != s.Points {
				t.Errorf("%s series %d: %d points, %d drawn", c.ID, i, s.Points, s.Drawn)
			}
		}
		if c.Counts {
			for _, y := range c.Y {
				if y != math.Trunc(y) {
					t.Errorf("%s: a chart of counts has the y tick %v: %v", c.ID, y, c.Y)
				}
			}
		}
		if strings.HasPrefix(c.ID, "chart-e2e") || strings.HasPrefix(c.ID, "chart-ttft") {
			continue // buckets, not time
		}
		if len(c.X) < 3 || c.X[0] != "0:00" {
			t.Errorf("%s: x labels %v, want m:ss since the job's start from 0:00", c.ID, c.X)
			continue
		}
		last, step := -1.0, 0.0
		for _, x := range c.X {
			m := sinceLabel.FindStringSubmatch(x)
			if m == nil {
				t.Errorf("%s: x label %q is not m:ss since the start: %v", c.ID, x, c.X)
				break
			}
			var mm, ss float64
			fmt.Sscan(m[1], &mm)
			fmt.Sscan(m[2], &ss)
			sec := 60*mm + ss
			if sec <= last || sec > span+1 {
				t.Errorf("%s: x label %q out of order or past the job's %v s: %v", c.ID, x, span, c.X)
				break
			}
			// Evenly spaced, but for the last (the job's end).
			if last >= 0 && step == 0 {
				step = sec - last
			} else if last >= 0 && sec-last != step && x != c.X[len(c.X)-1] {
				t.Errorf("%s: x label %q is %v s after the one before, the others %v s: %v", c.ID, x, sec-last, step, c.X)
				break
			}
			last = sec
		}
	}
	if t.Failed() {
		t.Logf("page and screenshot kept in %s", filepath.Dir(page))
	}
}
