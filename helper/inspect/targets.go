package inspect

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
)

// Target is one Prometheus scrape target of a node's collector (from the
// collector.yaml beside the files) and what metrics.jsonl holds of it: the
// receiver writes one `up` point per scrape, 1 when the target answered.
type Target struct {
	// Job is the scrape job (service.name.override of its resources).
	Job string
	// Instance is its instance label (service.instance.id).
	Instance string
	// Scrapes counts its up points; Answered those equal to 1.
	Scrapes, Answered int
	// WarmingUp counts the failed scrapes before the target's first
	// answer (a service still loading its model), Ended those after its
	// last answer (the service stopped before the collector): neither is
	// trouble. The failed scrapes between the first and last answer are
	// Scrapes - Answered - WarmingUp - Ended (see ScrapeCounts.Failed).
	WarmingUp, Ended int
	// First and Last are the timestamps of its first and last up point
	// (zero when none).
	First, Last time.Time
}

// Failed classifies one target's scrapes by when they failed: see
// Target. It returns the trouble: scrapes that failed between the first and
// the last answer, or every scrape of a target that never answered.
func (t Target) Failed() int {
	if t.Answered == 0 {
		return t.Scrapes
	}
	return t.Scrapes - t.Answered - t.WarmingUp - t.Ended
}

// scrapeLog collects one target's up points in any order: the times of
// its first and last answer and of every failed scrape, in Unix ms.
type scrapeLog struct {
	scrapes, answered int
	firstOK, lastOK   int64
	failed            []int64
}

// add records one up point at ms (Unix milliseconds); ok when it was 1.
func (l *scrapeLog) add(ms int64, ok bool) {
	l.scrapes++
	if !ok {
		l.failed = append(l.failed, ms)
		return
	}
	if l.answered == 0 || ms < l.firstOK {
		l.firstOK = ms
	}
	if l.answered == 0 || ms > l.lastOK {
		l.lastOK = ms
	}
	l.answered++
}

// counts returns scrapes, answered, warming up (failed before the first
// answer) and ended (failed after the last answer). A target that never
// answered has neither: all its scrapes failed.
func (l *scrapeLog) counts() (scrapes, answered, warmingUp, ended int) {
	if l.answered > 0 {
		for _, ms := range l.failed {
			switch {
			case ms < l.firstOK:
				warmingUp++
			case ms > l.lastOK:
				ended++
			}
		}
	}
	return l.scrapes, l.answered, warmingUp, ended
}

// Targets returns the scrape targets configured in dir/collector.yaml, in
// its order, with their scrapes counted in dir/metrics.jsonl. No
// collector.yaml is an error; a collector.yaml without a Prometheus
// receiver has no targets.
func Targets(dir string) ([]Target, error) {
	ts, index, err := configTargets(dir)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(dir, jobdir.SignalFile("metrics")))
	if errors.Is(err, os.ErrNotExist) {
		return ts, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	logs := make([]scrapeLog, len(ts))
	if err := countUp(f, ts, index, logs); err != nil {
		return nil, err
	}
	for i := range ts {
		ts[i].Scrapes, ts[i].Answered, ts[i].WarmingUp, ts[i].Ended = logs[i].counts()
	}
	return ts, nil
}

// configTargets returns the scrape targets of dir/collector.yaml, in its
// order, and their index by (job, instance).
func configTargets(dir string) ([]Target, map[[2]string]int, error) {
	data, err := os.ReadFile(filepath.Join(dir, jobdir.ConfigFile))
	if err != nil {
		return nil, nil, err
	}
	var cfg struct {
		Receivers map[string]struct {
			Config struct {
				ScrapeConfigs []struct {
					JobName       string `yaml:"job_name"`
					StaticConfigs []struct {
						Labels map[string]string `yaml:"labels"`
					} `yaml:"static_configs"`
				} `yaml:"scrape_configs"`
			} `yaml:"config"`
		} `yaml:"receivers"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", filepath.Join(dir, jobdir.ConfigFile), err)
	}
	unesc := func(s string) string { return strings.ReplaceAll(s, "$$", "$") }
	var names []string
	for name := range cfg.Receivers {
		if name == "prometheus" || strings.HasPrefix(name, "prometheus/") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var ts []Target
	index := map[[2]string]int{}
	for _, name := range names {
		for _, sc := range cfg.Receivers[name].Config.ScrapeConfigs {
			for _, st := range sc.StaticConfigs {
				t := Target{Job: unesc(sc.JobName), Instance: unesc(st.Labels["instance"])}
				index[[2]string{t.Job, t.Instance}] = len(ts)
				ts = append(ts, t)
			}
		}
	}
	return ts, index, nil
}

// countUp reads the up points of r into logs (index-aligned with ts) and
// sets each target's First and Last.
func countUp(r io.Reader, ts []Target, index map[[2]string]int, logs []scrapeLog) error {
	var l struct {
		ResourceMetrics []struct {
			Resource     resource `json:"resource"`
			ScopeMetrics []struct {
				Metrics []struct {
					Name  string `json:"name"`
					Gauge *struct {
						DataPoints []struct {
							Time     string   `json:"timeUnixNano"`
							AsDouble *float64 `json:"asDouble"`
						} `json:"dataPoints"`
					} `json:"gauge"`
				} `json:"metrics"`
			} `json:"scopeMetrics"`
		} `json:"resourceMetrics"`
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	for sc.Scan() {
		if !bytes.Contains(sc.Bytes(), []byte(`"name":"up"`)) {
			continue
		}
		l.ResourceMetrics = nil
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		for _, rm := range l.ResourceMetrics {
			var key [2]string
			for _, a := range rm.Resource.Attributes {
				if a.Value.StringValue == nil {
					continue
				}
				switch a.Key {
				case "service.name.override":
					key[0] = *a.Value.StringValue
				case "service.instance.id":
					key[1] = *a.Value.StringValue
				}
			}
			i, ok := index[key]
			if !ok {
				continue
			}
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if m.Name != "up" || m.Gauge == nil {
						continue
					}
					for _, dp := range m.Gauge.DataPoints {
						t := &ts[i]
						ns, err := strconv.ParseInt(dp.Time, 10, 64)
						logs[i].add(ns/1e6, dp.AsDouble != nil && *dp.AsDouble == 1)
						if err == nil {
							at := time.Unix(0, ns)
							if t.First.IsZero() || at.Before(t.First) {
								t.First = at
							}
							if at.After(t.Last) {
								t.Last = at
							}
						}
					}
				}
			}
		}
	}
	return sc.Err()
}

// WriteTargets prints one line per target for a person.
func WriteTargets(w io.Writer, ts []Target) {
	for _, t := range ts {
		fmt.Fprintf(w, "  target:     %s (%s): %s", t.Job, t.Instance, ScrapeSummary(t.Scrapes, t.Answered, t.WarmingUp, t.Ended))
		if !t.Last.IsZero() {
			fmt.Fprintf(w, ", first %s, last %s", t.First.UTC().Format("15:04:05.000"), t.Last.UTC().Format("15:04:05.000"))
		}
		fmt.Fprintln(w)
	}
}

// ScrapeSummary says a target's scrapes in words: "12 scrapes, 10
// answered", then "(2 before its first answer: warming up)" and "(1 after
// its last: it had ended)" where there are such, then "FAILED n" for the
// failed scrapes between the first and last answer (or every scrape of a
// target that never answered).
func ScrapeSummary(scrapes, answered, warmingUp, ended int) string {
	s := fmt.Sprintf("%d %s, %d answered", scrapes, plural(scrapes, "scrape"), answered)
	if warmingUp > 0 {
		s += fmt.Sprintf(" (%d before its first answer: warming up)", warmingUp)
	}
	if ended > 0 {
		s += fmt.Sprintf(" (%d after its last: it had ended)", ended)
	}
	failed := scrapes - answered - warmingUp - ended
	if answered == 0 {
		failed = scrapes
	}
	if failed > 0 || scrapes == 0 {
		s += fmt.Sprintf("  FAILED %d", failed)
	}
	return s
}

// Unanswered returns an error naming every target of dir with no answered
// scrape in its metrics.jsonl (nil when each has one).
func Unanswered(dir string, ts []Target) error {
	var errs []error
	for _, t := range ts {
		if t.Answered == 0 {
			errs = append(errs, fmt.Errorf("%s: scrape target %s (%s) has no sample in metrics.jsonl (%d %s, none answered)", dir, t.Job, t.Instance, t.Scrapes, plural(t.Scrapes, "scrape")))
		}
	}
	return errors.Join(errs...)
}
