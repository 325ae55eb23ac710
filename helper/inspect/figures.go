package inspect

import (
	"math"
	"sort"
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

func unknownQ() Quantiles {
	n := Value(math.NaN())
	return Quantiles{Count: 0, Mean: n, P50: n, P90: n, P99: n, Min: n, Max: n}
}

func sampleQuantiles(vs []float64, count int, total, min, max float64) Quantiles {
	q := unknownQ()
	q.Count = Value(count)
	if count > 0 {
		q.Mean = Value(total / float64(count))
		q.Min, q.Max = Value(min), Value(max)
	}
	cp := append([]float64(nil), vs...)
	q.P50 = Value(SampleQuantile(0.5, cp))
	q.P90 = Value(SampleQuantile(0.9, cp))
	q.P99 = Value(SampleQuantile(0.99, cp))
	return q
}

// spanQuantiles are the quantiles of every producer's spans of one name
// (exact while each producer's samples are all kept, from its uniform
// reservoir of 4096 beyond that).
func spanQuantiles(sts []*spanStat) Quantiles {
	var vs []float64
	n, total, min, max := 0, 0.0, math.Inf(1), 0.0
	for _, st := range sts {
		vs = append(vs, st.sample...)
		n += st.count
		total += st.totalMs
		max = math.Max(max, st.maxMs)
		if st.count > 0 {
			min = math.Min(min, st.minMs)
		}
	}
	return sampleQuantiles(vs, n, total, min, max)
}

// histFigures merges the histograms of one server (several series of one
// metric: engines) into quantiles and chart buckets.
func histFigures(hs []*histogram) (Quantiles, HistogramBuckets) {
	var sets [][]Bucket
	var sum histSummary
	hb := HistogramBuckets{Bounds: []float64{}, Counts: []float64{}}
	for _, h := range hs {
		if h == nil || h.n == 0 {
			continue
		}
		sets = append(sets, h.cumulative())
		sum.add(h)
		if len(hb.Counts) == 0 {
			hb.Bounds = append(hb.Bounds, h.bounds...)
			hb.Counts = append(hb.Counts, h.inc...)
		} else if sameBounds(hb.Bounds, h.bounds) {
			for i := range h.inc {
				hb.Counts[i] += h.inc[i]
			}
		}
	}
	if len(sets) == 0 {
		return unknownQ(), hb
	}
	return histQuantiles(mergeBuckets(sets...), sum), hb
}

func maxV(v Value, x float64) Value {
	if math.IsNaN(x) || (v.Known() && float64(v) >= x) {
		return v
	}
	return Value(x)
}

func addV(v Value, x float64) Value {
	if math.IsNaN(x) {
		return v
	}
	if !v.Known() {
		return Value(x)
	}
	return v + Value(x)
}
