package supervise

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
)

// sampledMax bounds the bytes read from metrics.jsonl per poll; the rest is
// read at the next poll.
const sampledMax = 8 << 20

// sampleFollower reads metrics.jsonl as it grows and keeps, per scrape
// target, the timestamp of its latest `up` point (the Prometheus receiver
// writes one per scrape, answered or not).
type sampleFollower struct {
	path    string
	off     int64
	partial []byte
	latest  map[render.Target]int64 // unix ns of the latest up point
	targets []render.Target
}

func newSampleFollower(metricsPath string, targets []render.Target) *sampleFollower {
	f := &sampleFollower{path: metricsPath, latest: map[render.Target]int64{}}
	for _, t := range targets {
		t.Port = 0
		f.targets = append(f.targets, t)
	}
	return f
}

// poll reads the lines appended since the last poll. A file that shrank (a
// restart cut a partial line) is followed from its new end.
func (f *sampleFollower) poll() error {
	fh, err := os.Open(f.path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return err
	}
	if fi.Size() < f.off {
		f.off, f.partial = fi.Size(), nil
	}
	if fi.Size() == f.off {
		return nil
	}
	buf := make([]byte, min(fi.Size()-f.off, sampledMax))
	n, err := fh.ReadAt(buf, f.off)
	if err != nil && err != io.EOF {
		return err
	}
	f.off += int64(n)
	data := append(f.partial, buf[:n]...)
	last := bytes.LastIndexByte(data, '\n')
	if last < 0 {
		f.partial = data
		return nil
	}
	f.partial = append([]byte(nil), data[last+1:]...)
	for _, line := range bytes.Split(data[:last], []byte("\n")) {
		f.line(line)
	}
	return nil
}

var upName = []byte(`"name":"up"`)

// line takes the up points of one OTLP-JSON metrics line.
func (f *sampleFollower) line(line []byte) {
	if !bytes.Contains(line, upName) {
		return
	}
	var l struct {
		ResourceMetrics []struct {
			Resource struct {
				Attributes []struct {
					Key   string `json:"key"`
					Value struct {
						S string `json:"stringValue"`
					} `json:"value"`
				} `json:"attributes"`
			} `json:"resource"`
			ScopeMetrics []struct {
				Metrics []struct {
					Name  string `json:"name"`
					Gauge struct {
						DataPoints []struct {
							Time string `json:"timeUnixNano"`
						} `json:"dataPoints"`
					} `json:"gauge"`
				} `json:"metrics"`
			} `json:"scopeMetrics"`
		} `json:"resourceMetrics"`
	}
	if json.Unmarshal(line, &l) != nil {
		return
	}
	for _, rm := range l.ResourceMetrics {
		var t render.Target
		for _, a := range rm.Resource.Attributes {
			switch a.Key {
			case "service.name.override":
				t.Job = a.Value.S
			case "service.instance.id":
				t.Instance = a.Value.S
			}
		}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != "up" {
					continue
				}
				for _, dp := range m.Gauge.DataPoints {
					ns, err := strconv.ParseInt(dp.Time, 10, 64)
					if err == nil && ns > f.latest[t] {
						f.latest[t] = ns
					}
				}
			}
		}
	}
}

// sampledAt is the time at or after which every target has a sample (the
// oldest of the targets' latest samples); zero when a target has none yet.
func (f *sampleFollower) sampledAt() time.Time {
	var oldest int64
	for i, t := range f.targets {
		ns := f.latest[t]
		if ns == 0 {
			return time.Time{}
		}
		if i == 0 || ns < oldest {
			oldest = ns
		}
	}
	if len(f.targets) == 0 {
		return time.Time{}
	}
	return time.Unix(0, oldest)
}

// sampledText is the control socket's answer (controlsock.go); ms is unix ms,
// 0 for not yet.
func sampledText(targets int, ms int64) []byte {
	return fmt.Appendf(nil, "%s=%d\n%s=%d\n", contract.ControlTargets, targets, contract.ControlSampledMs, ms)
}

// followSamples keeps srv's answer up to date from metricsPath until ctx
// ends. Errors reading the file are retried at the next poll; without
// targets there is nothing to follow.
func followSamples(ctx context.Context, srv *controlServer, metricsPath string, targets []render.Target, poll time.Duration) {
	f := newSampleFollower(metricsPath, targets)
	srv.set(len(targets), time.Time{})
	if len(targets) == 0 {
		return // targets=0: nothing to wait for
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if f.poll() != nil {
			continue
		}
		if at := f.sampledAt(); !at.IsZero() && !at.Equal(last) {
			srv.set(len(targets), at)
			last = at
		}
	}
}

// followSampled keeps the control socket's answer up to date (when the
// supervisor serves one) and returns the function that stops it.
func (s *supervisor) followSampled(ctx context.Context) (stop func()) {
	if s.control == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	targets := render.Targets(render.Input{Resolved: s.opt.Resolved, Job: render.JobOf(s.opt.Resolved, s.opt.Facts)})
	go followSamples(ctx, s.control, s.path(jobdir.SignalFile("metrics")), targets, DefaultSampledPoll)
	return cancel
}
