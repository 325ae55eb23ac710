package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
)

// SampledFile is the name of the sampled hint beside root's record: a file
// the prolog creates (root's directory, the job user's file) and the
// supervisor rewrites whenever its collector has written a new sample of
// every scrape target into metrics.jsonl. The batch step of a one-node job
// reads it after the script's last line and ends its final-scrape wait as
// soon as every target has a sample taken after that line. Its text:
//
//	targets=<number of scrape targets on this node>
//	sampled_ms=<unix ms: every target has a sample stamped at or after it; 0: not yet>
//
// It is a hint: a wrong value can only shorten or keep the job's own wait,
// never past one scrape interval plus 1 s.
const SampledFile = "sampled"

// DefaultSampledPoll is how often the supervisor reads the new lines of
// metrics.jsonl for the sampled hint.
const DefaultSampledPoll = 250 * time.Millisecond

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

// sampledText is the hint's text.
func sampledText(targets int, at time.Time) []byte {
	var ms int64
	if !at.IsZero() {
		ms = at.UnixMilli()
	}
	return fmt.Appendf(nil, "targets=%d\nsampled_ms=%d\n", targets, ms)
}

// followSamples keeps the sampled hint beside recordPath up to date until
// ctx ends. The hint file must exist (the prolog creates it); without it
// there is nothing to do. Errors end the follow quietly: the batch step
// then waits its full bound.
func followSamples(ctx context.Context, recordPath, metricsPath string, targets []render.Target, poll time.Duration) {
	hint, err := os.OpenFile(filepath.Join(filepath.Dir(recordPath), SampledFile), os.O_WRONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return
	}
	defer hint.Close()
	f := newSampleFollower(metricsPath, targets)
	write := func(at time.Time) bool {
		text := sampledText(len(targets), at)
		if _, err := hint.WriteAt(text, 0); err != nil {
			return false
		}
		return hint.Truncate(int64(len(text))) == nil
	}
	var last time.Time
	if !write(last) || len(targets) == 0 {
		return // targets=0: nothing to wait for
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
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
			if !write(at) {
				return
			}
			last = at
		}
	}
}

// followSampled starts keeping the sampled hint beside the job's record
// (when there is a record) and returns the function that stops it.
func (s *supervisor) followSampled(ctx context.Context) (stop func()) {
	if s.opt.RecordPath == "" {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	targets := render.Targets(render.Input{Resolved: s.opt.Resolved, Job: jobfacts.RenderJob(s.opt.Resolved, s.opt.Facts)})
	go followSamples(ctx, s.opt.RecordPath, filepath.Join(s.out, "metrics.jsonl"), targets, DefaultSampledPoll)
	return cancel
}
