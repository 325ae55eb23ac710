package testenv

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"time"
)

// Point is one data point of a Sum metric in an OTLP-JSON file of the file
// exporter, with the resource attributes the tests select on.
type Point struct {
	// Host and Job are the resource's host.name and slurm_job_id.
	Host, Job string
	// At is the point's timestamp (timeUnixNano).
	At time.Time
	// Value is asDouble or asInt (0 when the point has neither).
	Value float64
	// Flags are the point's flags (1: no recorded value, a staleness
	// marker of a failed scrape).
	Flags int
}

// SumPoints returns the points of the Sum metric called name in path, in
// file order. A line that does not parse (the last line of a file still
// being written) is skipped; a missing file has no points.
func SumPoints(path, name string) ([]Point, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type kv struct {
		Key   string `json:"key"`
		Value struct {
			S string `json:"stringValue"`
		} `json:"value"`
	}
	var out []Point
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	for sc.Scan() {
		var l struct {
			ResourceMetrics []struct {
				Resource struct {
					Attributes []kv `json:"attributes"`
				} `json:"resource"`
				ScopeMetrics []struct {
					Metrics []struct {
						Name string `json:"name"`
						Sum  *struct {
							DataPoints []struct {
								Time     string   `json:"timeUnixNano"`
								Flags    int      `json:"flags"`
								AsDouble *float64 `json:"asDouble"`
								AsInt    *string  `json:"asInt"`
							} `json:"dataPoints"`
						} `json:"sum"`
					} `json:"metrics"`
				} `json:"scopeMetrics"`
			} `json:"resourceMetrics"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		for _, rm := range l.ResourceMetrics {
			var p Point
			for _, a := range rm.Resource.Attributes {
				switch a.Key {
				case "host.name":
					p.Host = a.Value.S
				case "slurm_job_id":
					p.Job = a.Value.S
				}
			}
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if m.Name != name || m.Sum == nil {
						continue
					}
					for _, dp := range m.Sum.DataPoints {
						ns, _ := strconv.ParseInt(dp.Time, 10, 64)
						p.At, p.Flags, p.Value = time.Unix(0, ns), dp.Flags, 0
						switch {
						case dp.AsDouble != nil:
							p.Value = *dp.AsDouble
						case dp.AsInt != nil:
							p.Value, _ = strconv.ParseFloat(*dp.AsInt, 64)
						}
						out = append(out, p)
					}
				}
			}
		}
	}
	return out, sc.Err()
}

// Latest returns the newest of ps with host.name host and slurm_job_id job
// (any job when ""); ok is false when there is none.
func Latest(ps []Point, host, job string) (p Point, ok bool) {
	for _, q := range ps {
		if q.Host == host && (job == "" || q.Job == job) && (!ok || q.At.After(p.At)) {
			p, ok = q, true
		}
	}
	return p, ok
}
