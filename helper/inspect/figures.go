package inspect

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// minMax is the smallest and largest observation of a histogram point or
// of merged histograms, each only when known (the OTLP histogram point's
// optional min and max; Prometheus histograms have neither).
type minMax struct {
	min, max       float64
	hasMin, hasMax bool
}

// histSummary is what the figures of one or more merged histograms need
// besides their buckets: the observations' count and sum, and their min
// and max when every merged histogram with observations carries them.
type histSummary struct {
	count, sum float64
	mm         minMax
	merged     int
}

// add merges h (nil or empty histograms are skipped).
func (s *histSummary) add(h *histogram) {
	if h == nil || h.n == 0 || h.count == 0 {
		return
	}
	s.count += h.count
	s.sum += h.sum
	if s.merged == 0 {
		s.mm = minMax{min: h.min, max: h.max, hasMin: h.hasMin, hasMax: h.hasMax}
	} else {
		s.mm.hasMin = s.mm.hasMin && h.hasMin
		s.mm.hasMax = s.mm.hasMax && h.hasMax
		s.mm.min = math.Min(s.mm.min, h.min)
		s.mm.max = math.Max(s.mm.max, h.max)
	}
	s.merged++
}

// histQuantiles are the figures of cumulative buckets bs (sorted or not)
// summarised by s. P50, P90 and P99 are Prometheus' histogram_quantile,
// then clamped into [min, max] where those are known (an interpolated
// quantile can otherwise fall above the largest observation). When every
// observation fell into one bucket no quantile is made up: Within is the
// interval that holds them all ([min, max] where known, else the bucket's
// bounds) and the quantiles are null.
func histQuantiles(bs []Bucket, s histSummary) Quantiles {
	q := unknownQ()
	q.Count = Value(s.count)
	if s.count > 0 {
		q.Mean = Value(s.sum / s.count)
	}
	if s.mm.hasMax {
		q.Max = Value(s.mm.max)
	}
	if s.mm.hasMin {
		q.Min = Value(s.mm.min)
	}
	if s.count <= 0 || len(bs) == 0 {
		return q
	}
	sorted := append([]Bucket(nil), bs...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].UpperBound < sorted[j].UpperBound })
	used, prev := -1, 0.0
	for i, b := range sorted {
		if b.Count > prev {
			if used >= 0 {
				used = -2 // more than one bucket
				break
			}
			used = i
		}
		prev = math.Max(prev, b.Count)
	}
	if used >= 0 {
		lo, hi := math.Inf(-1), sorted[used].UpperBound
		if used > 0 {
			lo = sorted[used-1].UpperBound
		}
		if s.mm.hasMin {
			lo = s.mm.min
		}
		if s.mm.hasMax {
			hi = s.mm.max
		}
		q.Within = []Value{Value(lo), Value(hi)}
		return q
	}
	for _, x := range []struct {
		q float64
		v *Value
	}{{0.5, &q.P50}, {0.9, &q.P90}, {0.99, &q.P99}} {
		v := BucketQuantile(x.q, append([]Bucket(nil), bs...))
		if s.mm.hasMax && v > s.mm.max {
			v = s.mm.max
		}
		if s.mm.hasMin && v < s.mm.min {
			v = s.mm.min
		}
		v = meanBound(v, x.q, s)
		*x.v = Value(v)
	}
	return q
}

// meanBound keeps v, an estimate of the p-quantile of the observations
// s summarises, where their mean allows it. At least a share 1-p of the
// observations are at or above the p-quantile and the others at or above
// the min, so it is at most (mean - p*min)/(1-p); at least a share p are
// at or below it and the others at or below the max, so it is at least
// (mean - (1-p)*max)/p. Interpolating inside a wide bucket can break
// either (a p50 of 175 for observations of mean 110 and min 100).
func meanBound(v, p float64, s histSummary) float64 {
	if s.count <= 0 || p <= 0 || p >= 1 {
		return v
	}
	mean := s.sum / s.count
	if s.mm.hasMin {
		v = math.Min(v, (mean-p*s.mm.min)/(1-p))
	}
	if s.mm.hasMax {
		v = math.Max(v, (mean-(1-p)*s.mm.max)/p)
	}
	return v
}

// window is the time between a counter's first and last point, in
// seconds (NaN with fewer than two points): the window of its rate.
func (c *counter) window() float64 {
	if c == nil || c.n < 2 || c.lastMs == c.firstMs {
		return math.NaN()
	}
	return float64(c.lastMs-c.firstMs) / 1000
}

// maxProducerNames bounds the metric names kept per producer for the
// reasons of missing sections.
const maxProducerNames = 20

// noteName keeps a metric name a producer sent (bounded per producer).
func (a *aggregator) noteName(producer, name string) {
	if a.prodNames == nil {
		a.prodNames, a.scraped = map[string][]string{}, map[string]bool{}
	}
	if name == mUp {
		a.scraped[producer] = true // the Prometheus receiver's own series
		return
	}
	ns := a.prodNames[producer]
	if len(ns) >= maxProducerNames || contains(ns, name) {
		return
	}
	a.prodNames[producer] = append(ns, name)
}

// Reasons for a missing section or an unknown figure, in a word.
const (
	// WhyNotScraped: the job's collector.yaml has no such scrape target.
	WhyNotScraped = "not scraped"
	// WhyNothing: the source was there but sent nothing of it.
	WhyNothing = "nothing there"
	// WhyNames: data came, but under names the report does not know.
	WhyNames = "names not recognised"
	// WhyTwoScrapes: a rate or share needs two points and there was one.
	WhyTwoScrapes = "needs two scrapes"
)

// Absence is a section of the report that has no data, and why.
type Absence struct {
	// Section is "gym", "model servers", "GPUs", "hosts" or "spans".
	Section string `json:"section"`
	// Why is WhyNotScraped, WhyNothing or WhyNames.
	Why string `json:"why"`
	// Detail says what was looked for and, for WhyNames, names seen.
	Detail string `json:"detail"`
}

// absences fills r.Absent from the targets (Health, read before) and what
// the aggregator saw.
func (r *Report) absences(a *aggregator) {
	r.Absent = []Absence{}
	var targets []TargetHealth
	configs := 0 // dirs with a collector.yaml, which says what was scraped
	for _, d := range r.Health.Dirs {
		targets = append(targets, d.Targets...)
		if _, err := os.Stat(filepath.Join(d.Dir, "collector.yaml")); err == nil {
			configs++
		}
	}
	scrape := func(section string, have bool, isJob func(string) bool, want string) {
		if have {
			return
		}
		var ts []TargetHealth
		for _, t := range targets {
			if isJob(t.Job) {
				ts = append(ts, t)
			}
		}
		var seen []string
		for p, names := range a.prodNames {
			if isJob(p) {
				seen = append(seen, names...)
			}
		}
		sort.Strings(seen)
		answered, scrapes := 0, 0
		for _, t := range ts {
			answered += t.Answered
			scrapes += t.Scrapes
		}
		ab := Absence{Section: section}
		switch {
		case len(ts) == 0 && len(seen) == 0 && configs == 0:
			// A backend's files: no collector.yaml says what was scraped.
			ab.Why, ab.Detail = WhyNothing, "no "+want+" metric in the files, and no collector.yaml to say what was scraped"
		case len(ts) == 0 && len(seen) == 0:
			ab.Why, ab.Detail = WhyNotScraped, "no "+want+" target in collector.yaml"
		case len(seen) > 0 && (len(ts) == 0 || answered > 0):
			ab.Why, ab.Detail = WhyNames, "no "+want+" metric among: "+strings.Join(seen, ", ")
		case answered > 0:
			ab.Why, ab.Detail = WhyNothing, fmt.Sprintf("%d %s, %d answered, without any %s metric", scrapes, plural(scrapes, "scrape"), answered, want)
		default:
			ab.Why, ab.Detail = WhyNothing, fmt.Sprintf("%d %s, %d answered", scrapes, plural(scrapes, "scrape"), answered)
		}
		r.Absent = append(r.Absent, ab)
	}
	isModel := func(j string) bool {
		return j != "dcgm" && j != "node" && strings.Contains(j, "/") && !isOTLPProducer(a, j)
	}
	scrape("model servers", len(r.ModelServers) > 0, isModel, "vLLM (vllm:*)")
	scrape("GPUs", len(r.GPUs) > 0, func(j string) bool { return j == "dcgm" }, "dcgm-exporter (DCGM_FI_*)")
	scrape("hosts", len(r.Hosts) > 0, func(j string) bool { return j == "node" }, "node_exporter (node_*)")

	g := r.Gym
	if g.RolloutSpans.Count == 0 && g.RolloutHistogram.Count == 0 && len(g.Verify) == 0 && len(g.VerifySpans) == 0 {
		var seen []string
		for k := range a.spans {
			seen = append(seen, "span "+k[0])
		}
		for p, names := range a.prodNames {
			if isOTLPProducer(a, p) {
				seen = append(seen, names...)
			}
		}
		sort.Strings(seen)
		if len(seen) > 8 {
			seen = append(seen[:8], "...")
		}
		if len(seen) == 0 {
			r.Absent = append(r.Absent, Absence{Section: "gym", Why: WhyNothing, Detail: "no spans or OTLP metrics from the job's programs"})
		} else {
			r.Absent = append(r.Absent, Absence{Section: "gym", Why: WhyNames,
				Detail: "no " + spanRollout + " or " + spanVerify + " spans, no gym.* metrics among: " + strings.Join(seen, ", ")})
		}
	}
	if r.Spans.Total == 0 && len(r.Spans.SpanMetrics) == 0 {
		r.Absent = append(r.Absent, Absence{Section: "spans", Why: WhyNothing, Detail: "traces.jsonl holds no spans"})
	}
}

// isOTLPProducer reports whether a producer is a program sending OTLP,
// not a scrape target: it sent spans, or metrics without any `up`.
func isOTLPProducer(a *aggregator, p string) bool {
	for k := range a.spans {
		if k[1] == p {
			return true
		}
	}
	_, sent := a.prodNames[p]
	return sent && !a.scraped[p]
}

// absent returns the report's reason a section is empty, or nil.
func (r *Report) absent(section string) *Absence {
	for i := range r.Absent {
		if r.Absent[i].Section == section {
			return &r.Absent[i]
		}
	}
	return nil
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
