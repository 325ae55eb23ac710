package otlptest

import "time"

// SumPoint is one data point of a Sum metric, with the resource
// attributes the tests select on.
type SumPoint struct {
	// Host and Job are the resource's host.name and slurm_job_id (string
	// values; "" when absent).
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
func SumPoints(path, name string) ([]SumPoint, error) {
	d, err := ReadGrowing(path)
	if err != nil {
		return nil, err
	}
	var out []SumPoint
	for _, m := range d.Named(name) {
		if m.Sum == nil {
			continue
		}
		host, _ := m.Resource.Str("host.name")
		job, _ := m.Resource.Str("slurm_job_id")
		for _, dp := range m.Sum.DataPoints {
			out = append(out, SumPoint{Host: host, Job: job, At: dp.At(), Value: dp.Value(), Flags: dp.Flags})
		}
	}
	return out, nil
}

// Latest returns the newest of ps with host.name host and slurm_job_id job
// (any job when ""); ok is false when there is none.
func Latest(ps []SumPoint, host, job string) (p SumPoint, ok bool) {
	for _, q := range ps {
		if q.Host == host && (job == "" || q.Job == job) && (!ok || q.At.After(p.At)) {
			p, ok = q, true
		}
	}
	return p, ok
}
