// Package inspect summarises the OTLP-JSON lines a job's collector wrote
// (<job dir>/otel/{metrics,traces,logs}.jsonl), so a run can be looked at
// without backend access.
package inspect

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Summary is what one output dir holds.
type Summary struct {
	// Dir is the output dir read.
	Dir string
	// Lines counts the lines of each file; BadLines those that did not parse
	// (the last line of a file still being written may be partial).
	Lines, BadLines map[string]int
	// Spans, LogRecords and DataPoints count the items.
	Spans, LogRecords, DataPoints int
	// Producers counts items by service.name.override.
	Producers map[string]int
	// Metrics are the metric names seen, sorted.
	Metrics []string
	// Identity holds the resource attributes user, run_id, slurm_job_id,
	// slurm_job_restart_count, slurm_job_sluid, benchmark, cluster, model,
	// service.name and host.name seen (each value set joined; an Int value
	// ends in " (int)"). Several values of slurm_job_restart_count or
	// slurm_job_id mean several runs wrote the files.
	Identity map[string][]string
}

var identityKeys = []string{"service.name", "user", "run_id", "slurm_job_id", "slurm_job_restart_count", "slurm_job_sluid", "benchmark", "cluster", "model", "host.name"}

// Dir reads metrics.jsonl, traces.jsonl and logs.jsonl of dir. A missing
// file counts as empty; no file at all is an error.
func Dir(dir string) (*Summary, error) {
	s := &Summary{Dir: dir, Lines: map[string]int{}, BadLines: map[string]int{}, Producers: map[string]int{}, Identity: map[string][]string{}}
	metrics := map[string]bool{}
	found := 0
	for _, sig := range []string{"metrics", "traces", "logs"} {
		f, err := os.Open(filepath.Join(dir, sig+".jsonl"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		found++
		err = s.read(f, sig, metrics)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s.jsonl: %w", sig, err)
		}
	}
	if found == 0 {
		return nil, fmt.Errorf("%s: no metrics.jsonl, traces.jsonl or logs.jsonl", dir)
	}
	for m := range metrics {
		s.Metrics = append(s.Metrics, m)
	}
	sort.Strings(s.Metrics)
	for k, v := range s.Identity {
		sort.Strings(v)
		s.Identity[k] = v
	}
	return s, nil
}

type anyValue struct {
	StringValue *string `json:"stringValue"`
	IntValue    *string `json:"intValue"`
}

type attr struct {
	Key   string   `json:"key"`
	Value anyValue `json:"value"`
}

type resource struct {
	Attributes []attr `json:"attributes"`
}

type dataPoints struct {
	DataPoints []json.RawMessage `json:"dataPoints"`
}

type line struct {
	ResourceMetrics []struct {
		Resource     resource `json:"resource"`
		ScopeMetrics []struct {
			Metrics []struct {
				Name      string      `json:"name"`
				Sum       *dataPoints `json:"sum"`
				Gauge     *dataPoints `json:"gauge"`
				Histogram *dataPoints `json:"histogram"`
			} `json:"metrics"`
		} `json:"scopeMetrics"`
	} `json:"resourceMetrics"`
	ResourceSpans []struct {
		Resource   resource `json:"resource"`
		ScopeSpans []struct {
			Spans []json.RawMessage `json:"spans"`
		} `json:"scopeSpans"`
	} `json:"resourceSpans"`
	ResourceLogs []struct {
		Resource  resource `json:"resource"`
		ScopeLogs []struct {
			LogRecords []json.RawMessage `json:"logRecords"`
		} `json:"scopeLogs"`
	} `json:"resourceLogs"`
}

func (s *Summary) read(r io.Reader, sig string, metrics map[string]bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	for sc.Scan() {
		s.Lines[sig]++
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			s.BadLines[sig]++
			continue
		}
		for _, rm := range l.ResourceMetrics {
			n := 0
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					metrics[m.Name] = true
					for _, d := range []*dataPoints{m.Sum, m.Gauge, m.Histogram} {
						if d != nil {
							n += len(d.DataPoints)
						}
					}
				}
			}
			s.DataPoints += n
			s.resource(rm.Resource, n)
		}
		for _, rs := range l.ResourceSpans {
			n := 0
			for _, ss := range rs.ScopeSpans {
				n += len(ss.Spans)
			}
			s.Spans += n
			s.resource(rs.Resource, n)
		}
		for _, rl := range l.ResourceLogs {
			n := 0
			for _, sl := range rl.ScopeLogs {
				n += len(sl.LogRecords)
			}
			s.LogRecords += n
			s.resource(rl.Resource, n)
		}
	}
	return sc.Err()
}

func (s *Summary) resource(r resource, items int) {
	producer := "(none)"
	for _, a := range r.Attributes {
		v := ""
		switch {
		case a.Value.StringValue != nil:
			v = *a.Value.StringValue
		case a.Value.IntValue != nil:
			v = *a.Value.IntValue + " (int)"
		}
		if a.Key == "service.name.override" {
			producer = v
		}
		for _, k := range identityKeys {
			if a.Key == k && !contains(s.Identity[k], v) {
				s.Identity[k] = append(s.Identity[k], v)
			}
		}
	}
	s.Producers[producer] += items
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// Write prints the summary for a person.
func (s *Summary) Write(w io.Writer) {
	fmt.Fprintf(w, "%s\n", s.Dir)
	fmt.Fprintf(w, "  files:      metrics.jsonl %d lines, traces.jsonl %d lines, logs.jsonl %d lines",
		s.Lines["metrics"], s.Lines["traces"], s.Lines["logs"])
	if bad := s.BadLines["metrics"] + s.BadLines["traces"] + s.BadLines["logs"]; bad > 0 {
		fmt.Fprintf(w, " (%d did not parse)", bad)
	}
	fmt.Fprintf(w, "\n  items:      %d metric data points, %d spans, %d log records\n", s.DataPoints, s.Spans, s.LogRecords)
	var prods []string
	for p, n := range s.Producers {
		prods = append(prods, fmt.Sprintf("%s (%d)", p, n))
	}
	sort.Strings(prods)
	fmt.Fprintf(w, "  producers:  %s\n", strings.Join(prods, ", "))
	for _, k := range identityKeys {
		if v := s.Identity[k]; len(v) > 0 {
			fmt.Fprintf(w, "  %-13s %s\n", k+":", strings.Join(v, ", "))
		}
	}
	if len(s.Metrics) > 0 {
		fmt.Fprintf(w, "  metrics:    %d names: %s\n", len(s.Metrics), abbreviate(s.Metrics, 8))
	}
}

func abbreviate(list []string, n int) string {
	if len(list) <= n {
		return strings.Join(list, ", ")
	}
	return strings.Join(list[:n], ", ") + fmt.Sprintf(", ... (%d more)", len(list)-n)
}
