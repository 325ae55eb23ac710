package inspect

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

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
