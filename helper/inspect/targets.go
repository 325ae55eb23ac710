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
	// First and Last are the timestamps of its first and last up point
	// (zero when none).
	First, Last time.Time
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
	f, err := os.Open(filepath.Join(dir, "metrics.jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		return ts, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ts, countUp(f, ts, index)
}

// configTargets returns the scrape targets of dir/collector.yaml, in its
// order, and their index by (job, instance).
func configTargets(dir string) ([]Target, map[[2]string]int, error) {
	data, err := os.ReadFile(filepath.Join(dir, "collector.yaml"))
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
		return nil, nil, fmt.Errorf("%s: %w", filepath.Join(dir, "collector.yaml"), err)
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

func countUp(r io.Reader, ts []Target, index map[[2]string]int) error {
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
						t.Scrapes++
						if dp.AsDouble != nil && *dp.AsDouble == 1 {
							t.Answered++
						}
						if ns, err := strconv.ParseInt(dp.Time, 10, 64); err == nil {
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
		fmt.Fprintf(w, "  target:     %s (%s): %d %s, %d answered", t.Job, t.Instance, t.Scrapes, plural(t.Scrapes, "scrape"), t.Answered)
		if !t.Last.IsZero() {
			fmt.Fprintf(w, ", first %s, last %s", t.First.UTC().Format("15:04:05.000"), t.Last.UTC().Format("15:04:05.000"))
		}
		fmt.Fprintln(w)
	}
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
