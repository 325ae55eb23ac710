package inspect

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// chartFacts is what the page records of each chart it drew (its body's
// data-chart-facts): the series' points, point radius and drawn elements,
// the x tick labels and y tick values.
type chartFacts struct {
	ID     string `json:"id"`
	Counts bool   `json:"counts"`
	Series []struct {
		Points int     `json:"points"`
		Radius float64 `json:"radius"`
		Drawn  int     `json:"drawn"`
	} `json:"series"`
	X []string  `json:"x"`
	Y []float64 `json:"y"`
	// XMin is a time chart's left edge in s since XOrigin, the page's
	// time origin (RFC 3339); nil and "" for the histograms.
	XMin    *float64 `json:"x_min"`
	XOrigin string   `json:"x_origin"`
	// Bands is how many shaded spans the chart has (the steps' windows
	// on the GPU power chart).
	Bands int `json:"bands"`
}

// writeCollectorJob writes a one-node job dir with helper/render's golden
// collector.yaml, metrics.jsonl and a final receipt without loss.
func writeCollectorJob(t *testing.T, metrics string) string {
	t.Helper()
	job := t.TempDir()
	dir := filepath.Join(job, "otel")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile("../render/testdata/two-services.golden.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"collector.yaml": string(cfg), "metrics.jsonl": metrics} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rc := &receipt.Receipt{JobID: "42", Node: "gn1", Basis: receipt.BasisFinal, Collectors: 1, Signals: map[string]receipt.Counts{
		"traces": {Received: 0}, "metrics": {Received: 10, Written: 10, Sent: 10}, "logs": {}}}
	if err := rc.Write(dir); err != nil {
		t.Fatal(err)
	}
	return job
}

// writeReportPage writes r as HTML (Chart.js inlined) to report.html in
// the test's artifacts dir and returns the page's text and path; "" when
// Chart.js is not installed (said through testenv.Missing).
func writeReportPage(t *testing.T, r *Report) (html, page string) {
	t.Helper()
	js, err := LoadChartJS("")
	if err != nil {
		testenv.Missing(t, err.Error())
		return "", ""
	}
	page = filepath.Join(testenv.Artifacts(t), "report.html")
	var b strings.Builder
	if err := r.WriteHTML(&b, js); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return b.String(), page
}

// checkHTML writes r's page, opens it in Chromium and checks what a reader
// sees first and that every chart drew every series: a series of one point
// with a visible point, distinct time labels, whole numbers on the axes of
// counts. It returns the facts of the charts.
func checkHTML(t *testing.T, r *Report, wantCharts ...string) []chartFacts {
	t.Helper()
	html, page := writeReportPage(t, r)
	if html == "" {
		return nil
	}
	// The summary comes first: before the charts and the tables.
	sum, charts := strings.Index(html, `id="summary"`), strings.Index(html, `id="charts"`)
	if sum < 0 || charts < sum || strings.Index(html, `id="sum-rollouts"`) > charts || strings.Index(html, `id="delivery"`) > charts {
		t.Errorf("the page does not open on the summary (summary at %d, charts at %d)", sum, charts)
	}
	testenv.CheckPage(t, page, filepath.Join(filepath.Dir(page), "report.png"), wantCharts...)
	var facts []chartFacts
	if err := json.Unmarshal([]byte(testenv.EvalPage(t, page, "chart-facts")), &facts); err != nil {
		t.Fatal(err)
	}
	if len(facts) != len(wantCharts) {
		t.Errorf("%d charts drawn, want %v: %+v", len(facts), wantCharts, facts)
	}
	checkTimeOrigin(t, r, facts)
	for _, c := range facts {
		for i, s := range c.Series {
			if s.Drawn != s.Points || (s.Points < 2 && s.Radius <= 0) {
				t.Errorf("%s series %d: %d points, %d drawn, point radius %v: not visible", c.ID, i, s.Points, s.Drawn, s.Radius)
			}
		}
		seen := map[string]bool{}
		for _, x := range c.X {
			if seen[x] && !strings.HasPrefix(c.ID, "chart-e2e") && !strings.HasPrefix(c.ID, "chart-ttft") {
				t.Errorf("%s: x label %q twice: %v", c.ID, x, c.X)
			}
			seen[x] = true
		}
		if c.Counts {
			for _, y := range c.Y {
				if y != math.Trunc(y) {
					t.Errorf("%s: a chart of counts has the y tick %v: %v", c.ID, y, c.Y)
				}
			}
		}
	}
	return facts
}

// TestHTMLShortJob: a job of 0.2 s, every series one scrape: the page
// opens on its summary (3 rollouts, nothing lost), and draws each
// one-point series as a point, at x labels in seconds since the start.
func TestHTMLShortJob(t *testing.T) {
	r, err := Build(writeCollectorJob(t, vllmScrape("gn1", 0, 100, [4]int{1, 2, 1, 0}, 2, 0.3)+
		histLine("gn1", mRolloutMs, 0, [5]int{0, 2, 0, 1, 0}, 89, `,"min":19,"max":51`)))
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Summary; s.Rollouts != 3 || !s.DeliveryOK || !strings.HasPrefix(s.Delivery, "nothing lost: the backend accepted all 0 spans, 10 metric points") {
		t.Errorf("summary %+v", s)
	}
	facts := checkHTML(t, r, "chart-queue", "chart-kvcache", "chart-rollouts", "chart-e2e-0")
	for _, c := range facts {
		if c.ID == "chart-queue" && (len(c.X) == 0 || !strings.HasSuffix(c.X[0], " s")) {
			t.Errorf("short job's time labels %v, want seconds since the start", c.X)
		}
	}
}

// TestHTMLLongJob: two hours scraped every 30 s (240 points a series): the
// time labels are h:mm:ss since the start, all distinct.
func TestHTMLLongJob(t *testing.T) {
	var m strings.Builder
	for i := 0; i < 240; i++ {
		sec := 30 * i
		m.WriteString(vllmScrape("gn1", sec, float64(100*i), [4]int{i, 2 * i, i, 0}, float64(i%5), float64(i%10)/10))
		m.WriteString(dcgmScrape("gn1", sec, float64(i%100), 0))
		m.WriteString(histLine("gn1", mRolloutMs, sec, [5]int{0, 2 * i, 0, i, 0}, float64(i)*89, `,"min":19,"max":51`))
	}
	r, err := Build(writeCollectorJob(t, m.String()))
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Summary; s.Rollouts != 239*3 || s.Throughput == "" {
		t.Errorf("summary %+v", s)
	}
	facts := checkHTML(t, r, "chart-queue", "chart-kvcache", "chart-gpu", "chart-rollouts", "chart-e2e-0")
	for _, c := range facts {
		if c.ID == "chart-gpu" && (len(c.X) < 3 || fmt.Sprint(c.X) == "" || !strings.Contains(c.X[len(c.X)-1], ":")) {
			t.Errorf("long job's time labels %v, want h:mm:ss since the start", c.X)
		}
	}
}

// checkTimeOrigin: one time origin for the page, the phases' where there
// are any, else the job's first item; every time chart starts at the job's
// first item, the phase chart at the origin itself. It returns the metric
// charts' left edge (s since the origin; 0 when there is none).
func checkTimeOrigin(t *testing.T, r *Report, facts []chartFacts) float64 {
	t.Helper()
	origin := r.phaseOrigin()
	if origin.IsZero() {
		origin = r.Job.Start
	}
	edge := 0.0
	for _, c := range facts {
		if strings.HasPrefix(c.ID, "chart-e2e") || strings.HasPrefix(c.ID, "chart-ttft") {
			continue // histograms: no time axis
		}
		o, err := time.Parse(time.RFC3339Nano, c.XOrigin)
		if err != nil || !o.Equal(origin.Truncate(time.Millisecond)) {
			t.Errorf("%s counts from %q, the page's origin is %v", c.ID, c.XOrigin, origin)
			continue
		}
		want := r.Job.Start.Sub(o).Seconds()
		if c.ID == "chart-phases" {
			want = 0
		} else {
			edge = want
		}
		if c.XMin == nil || math.Abs(*c.XMin-want) > 0.002 {
			t.Errorf("%s starts at %v s since the origin, want %.3f", c.ID, c.XMin, want)
		}
	}
	return edge
}

// TestHTMLOneTimeOrigin: on a job with phases and model-server charts
// (the recorded two-node run), the metric charts count from the phases'
// origin, the submit, and start at the job's first item, seconds later:
// a rise lines up with the phase table.
func TestHTMLOneTimeOrigin(t *testing.T) {
	r, _, _ := manyNodes(t, 2, nil)
	_, page := writeReportPage(t, r)
	if page == "" {
		return
	}
	var facts []chartFacts
	if err := json.Unmarshal([]byte(testenv.EvalPage(t, page, "chart-facts")), &facts); err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for _, c := range facts {
		ids = append(ids, c.ID)
	}
	if !strings.Contains(strings.Join(ids, " "), "chart-phases") || len(facts) < 3 {
		t.Fatalf("charts %v: want the phases and the metric charts", ids)
	}
	if edge := checkTimeOrigin(t, r, facts); edge <= 0 {
		t.Errorf("the job's first item is %.3f s after the origin: the run does not show the two origins apart", edge)
	} else {
		t.Logf("%d charts from one origin; the metric charts start %.3f s after it (%v)", len(facts), edge, ids)
	}
}
