package supervise

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/inspect"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
)

// Energy metrics to the backend. At the drain, once the collector has
// exited, the supervisor reads its own node dir as inspect does
// (inspect.BuildNode: the same computation, the same verdicts) and appends
// the energy of the job's GPUs on this node per Slurm step as one
// OTLP-JSON line to metrics.jsonl, which it then sends to the backend with
// the drain's other lines (afterdrain.go), under the run's identity
// (render.Identity), so that a dashboard can sum a campaign's joules by
// run, step, role or verdict. The files are read whole within the
// drain's wait, so only up to EnergyMaxBytes (metrics.jsonl plus
// traces.jsonl; about 1.5 s for 11 MiB on 2 cores); a larger node dir gets
// no line (the log says so) and `inspect` still gives the figures.

// EnergyMaxBytes is the most bytes of metrics.jsonl and traces.jsonl the
// supervisor reads at the drain for the energy per step (or
// Options.SpanCountMaxBytes where that is lower: the tests' hook).
const EnergyMaxBytes = 16 << 20

// The points are vocab.GPUEnergy and vocab.GPUEnergyEstimate, with the
// attributes of vocab.GPUEnergyAttrs.
const (
	// energyScope is the points' instrumentation scope.
	energyScope = "gym-otel-spank/energy"
)

type (
	jsonGaugePoint struct {
		Attributes []jsonKV `json:"attributes"`
		Start      string   `json:"startTimeUnixNano"`
		Time       string   `json:"timeUnixNano"`
		AsDouble   float64  `json:"asDouble"`
	}
	jsonGaugeMetric struct {
		Name        string `json:"name"`
		Unit        string `json:"unit"`
		Description string `json:"description"`
		Gauge       struct {
			DataPoints []jsonGaugePoint `json:"dataPoints"`
		} `json:"gauge"`
	}
)

// EnergyMetricsLine is the figures of steps (one node's, inspect's
// StepEnergy) as one OTLP-JSON line (newline included) for metrics.jsonl:
// resource identity, vocab.GPUEnergy and vocab.GPUEnergyEstimate points, roles
// the node's roles. nil when no step has a figure or an estimate. Errors:
// an Int attribute of identity that is not one.
func EnergyMetricsLine(identity []render.Attr, steps []inspect.StepEnergy, roles []string) ([]byte, int, error) {
	res, err := resourceAttrs(identity)
	if err != nil {
		return nil, 0, err
	}
	measured := jsonGaugeMetric{Name: vocab.GPUEnergy, Unit: "J", Description: "Energy of the job's GPUs on the node over a Slurm step (dcgm-exporter's counter, else its power integrated)"}
	estimated := jsonGaugeMetric{Name: vocab.GPUEnergyEstimate, Unit: "J", Description: "Estimated energy of the job's MIG instances on the node over a Slurm step (the parent GPU's times their compute share)"}
	points := 0
	for _, se := range steps {
		if se.Start == nil || se.End == nil || se.Link != "" {
			continue
		}
		p := jsonGaugePoint{Start: strconv.FormatInt(se.Start.UnixNano(), 10), Time: strconv.FormatInt(se.End.UnixNano(), 10)}
		source := strings.NewReplacer(inspect.SourceEnergyCounter, "counter", inspect.SourcePower, "power", " + ", "+").Replace(se.Source)
		verdict := func(v inspect.Verdict) []jsonKV {
			return []jsonKV{jsonStr(vocab.AttrStepID, se.Step), jsonStr(vocab.AttrEnergyRole, strings.Join(roles, ",")), jsonStr(vocab.AttrEnergySource, source),
				{Key: vocab.AttrEnergyTrusted, Value: jsonValue{BoolValue: &v.Trusted}}, jsonStr(vocab.AttrEnergyWhy, strings.Join(v.Why, "; "))}
		}
		switch {
		case se.Joules.Known():
			p.Attributes, p.AsDouble = verdict(se.Verdict), float64(se.Joules)
			measured.Gauge.DataPoints = append(measured.Gauge.DataPoints, p)
			points++
		case se.Estimate != nil && se.Estimate.Joules.Known():
			p.Attributes, p.AsDouble = append(verdict(se.Estimate.Verdict), jsonStr(vocab.AttrEnergyMethod, se.Estimate.Method)), float64(se.Estimate.Joules)
			estimated.Gauge.DataPoints = append(estimated.Gauge.DataPoints, p)
			points++
		}
	}
	if points == 0 {
		return nil, 0, nil
	}
	var metrics []jsonGaugeMetric
	for _, x := range []jsonGaugeMetric{measured, estimated} {
		if len(x.Gauge.DataPoints) > 0 {
			metrics = append(metrics, x)
		}
	}
	b, err := metricsLine(jsonAttrs(res), energyScope, metrics)
	if err != nil {
		return nil, 0, err
	}
	return b, points, nil
}

// appendEnergyMetrics reads the node dir (inspect.BuildNode, bounded by
// EnergyMaxBytes) and appends its energy per step (EnergyMetricsLine)
// to metrics.jsonl, noted for the receipt; false when there is nothing to
// append or it could not be (logged).
func (s *supervisor) appendEnergyMetrics(identity []render.Attr) (appendedLine, bool) {
	if s.o.GPUMetricsPort == 0 {
		return appendedLine{}, false // no dcgm-exporter scraped: no GPU energy
	}
	size := int64(0)
	for _, sig := range []string{"metrics", "traces"} {
		if fi, err := os.Stat(s.path(jobdir.SignalFile(sig))); err == nil {
			size += fi.Size()
		}
	}
	if limit := min(int64(EnergyMaxBytes), s.opt.SpanCountMaxBytes); size > limit {
		s.log.Infof("energy per step not appended: the node's files (%d bytes) are over %d bytes; `inspect` gives the figures", size, limit)
		return appendedLine{}, false
	}
	start := time.Now()
	r, err := inspect.BuildNode(s.base(), s.opt.Facts.Node)
	if err != nil {
		s.log.Warnf("energy per step not appended: %v", err)
		return appendedLine{}, false
	}
	var roles []string
	for _, re := range r.RoleEnergy {
		if !slices.Contains(roles, re.Role) {
			roles = append(roles, re.Role)
		}
	}
	line, points, err := EnergyMetricsLine(identity, r.StepEnergy, roles)
	if err == nil && line == nil {
		return appendedLine{}, false
	}
	if err == nil {
		var al appendedLine
		if al, err = s.appendNoted("metrics", line, 0, points); err == nil {
			s.log.Infof("the energy per step (%d points, read in %d ms) appended to %s (%s)", points, time.Since(start).Milliseconds(),
				filepath.Join(s.out, jobdir.SignalFile("metrics")), al.where(s))
			return al, true
		}
	}
	appendLog(s.logPath, fmt.Sprintf("gym-otel: the energy per step could not be written to metrics.jsonl: %v", err))
	s.log.Warnf("the energy per step could not be written to metrics.jsonl: %v", err)
	return appendedLine{}, false
}
