package inspect

import (
	"math"
	"sort"
)

// maxTimeline bounds the points a timeline keeps: when full, every other
// point is dropped and only every second later point is kept, so a series
// of any length costs at most this many points and still spans the run.
const maxTimeline = 240

// timeline is a bounded, evenly thinned series of (unix ms, value) points.
type timeline struct {
	pts    [][2]float64
	stride int // keep every stride-th offered point
	seen   int
}

func (tl *timeline) add(ms int64, v float64) {
	if tl.stride == 0 {
		tl.stride = 1
	}
	tl.seen++
	if (tl.seen-1)%tl.stride != 0 {
		// Keep the newest value in the last slot so the series ends at
		// its last point.
		if n := len(tl.pts); n > 0 && tl.stride > 1 {
			tl.pts[n-1] = [2]float64{float64(ms), v}
		}
		return
	}
	if len(tl.pts) == maxTimeline {
		k := 0
		for i := 0; i < len(tl.pts); i += 2 {
			tl.pts[k] = tl.pts[i]
			k++
		}
		tl.pts = tl.pts[:k]
		tl.stride *= 2
	}
	tl.pts = append(tl.pts, [2]float64{float64(ms), v})
}

func points(pts [][2]float64) []Point {
	out := make([]Point, len(pts))
	for i, p := range pts {
		out[i] = Point(p)
	}
	return out
}

// counter is a monotonic cumulative sum over the run. A value below the
// previous one is a reset (a restarted server or SDK), as Prometheus'
// rate() counts it: the count goes on from the value before the reset.
// The first point counts from zero (the job's own servers start with it).
type counter struct {
	n               int
	firstMs, lastMs int64
	firstAdj        float64 // reset-adjusted value at the first point
	last            float64 // raw last value
	offset          float64 // sum of the values before each reset
	resets          int
	tl              timeline // reset-adjusted cumulative values
}

func (c *counter) add(ms int64, v float64) {
	if c.n > 0 && ms <= c.lastMs {
		return // a repeated or older point
	}
	if c.n > 0 && v < c.last {
		c.offset += c.last
		c.resets++
	}
	if c.n == 0 {
		c.firstMs, c.firstAdj = ms, v
	}
	c.n++
	c.last, c.lastMs = v, ms
	c.tl.add(ms, v+c.offset)
}

// addDelta adds a delta-temporality point.
func (c *counter) addDelta(ms int64, v float64) {
	if c.n == 0 {
		c.firstMs = ms
	}
	c.n++
	c.last += v
	if ms > c.lastMs {
		c.lastMs = ms
	}
	c.tl.add(ms, c.last)
}

// total is the count over the run, from zero at the first point.
func (c *counter) total() float64 { return c.last + c.offset }

// rate is the per-second increase between the first and the last point
// (NaN with fewer than two points).
func (c *counter) rate() float64 {
	if c.n < 2 || c.lastMs == c.firstMs {
		return math.NaN()
	}
	return (c.total() - c.firstAdj) / (float64(c.lastMs-c.firstMs) / 1000)
}

// rates is the per-second rate between consecutive kept points, at the
// later point's time.
func (c *counter) rates() [][2]float64 {
	var out [][2]float64
	for i := 1; i < len(c.tl.pts); i++ {
		a, b := c.tl.pts[i-1], c.tl.pts[i]
		if dt := (b[0] - a[0]) / 1000; dt > 0 {
			out = append(out, [2]float64{b[0], (b[1] - a[1]) / dt})
		}
	}
	return out
}

// gauge keeps the statistics of a gauge over the run and its timeline.
type gauge struct {
	n               int
	sum, min, max   float64
	last            float64
	firstMs, lastMs int64
	tl              timeline
}

func (g *gauge) add(ms int64, v float64) {
	if math.IsNaN(v) {
		return
	}
	if g.n == 0 || v < g.min {
		g.min = v
	}
	if g.n == 0 || v > g.max {
		g.max = v
	}
	if g.n == 0 {
		g.firstMs = ms
	}
	g.n++
	g.sum += v
	g.last, g.lastMs = v, ms
	g.tl.add(ms, v)
}

func (g *gauge) mean() float64 {
	if g.n == 0 {
		return math.NaN()
	}
	return g.sum / float64(g.n)
}

// histogram is an explicit-bounds histogram over the run: per bucket, the
// observations counted since the series' first point (from zero), with
// resets (a count below the previous one) handled as for counters.
type histogram struct {
	bounds     []float64 // explicit bounds; bucket i is (bounds[i-1], bounds[i]], the last (bounds[n-1], +Inf)
	inc        []float64 // observations per bucket over the run
	prev       []float64 // the last point's cumulative per-bucket counts
	prevCount  float64
	count, sum float64
	prevSum    float64
	max        float64
	hasMax     bool
	min        float64
	hasMin     bool
	n          int
	lastMs     int64
	tl         timeline // cumulative observation count
	// startMs is the start time of a cumulative series' first point
	// (its startTimeUnixNano, ms): its count is what was observed since
	// then; 0 when not told, or for a delta series.
	startMs int64
}

func sameBounds(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// add takes one point: bucket counts (len(bounds)+1 of them), its count,
// sum, min and max (mm.hasMin, mm.hasMax false when the point has none),
// cumulative or delta.
// A point whose bounds differ from the series' first point is skipped and
// reported false.
func (h *histogram) add(ms int64, bounds, counts []float64, count, sum float64, mm minMax, delta bool) bool {
	if len(counts) != len(bounds)+1 {
		return false
	}
	if h.n == 0 {
		h.bounds = append([]float64(nil), bounds...)
		h.inc = make([]float64, len(counts))
		h.prev = make([]float64, len(counts))
	} else if !sameBounds(h.bounds, bounds) {
		return false
	}
	if !delta && h.n > 0 && ms <= h.lastMs {
		return true
	}
	switch {
	case delta:
		for i, c := range counts {
			h.inc[i] += c
		}
		h.count += count
		h.sum += sum
	case h.n > 0 && count >= h.prevCount:
		for i, c := range counts {
			if d := c - h.prev[i]; d > 0 {
				h.inc[i] += d
			}
		}
		h.count += count - h.prevCount
		h.sum += sum - h.prevSum
	default: // the first point, or a reset: counted from zero
		for i, c := range counts {
			h.inc[i] += c
		}
		h.count += count
		h.sum += sum
	}
	copy(h.prev, counts)
	h.prevCount, h.prevSum = count, sum
	if mm.hasMax && (!h.hasMax || mm.max > h.max) {
		h.max, h.hasMax = mm.max, true
	}
	if mm.hasMin && (!h.hasMin || mm.min < h.min) {
		h.min, h.hasMin = mm.min, true
	}
	h.n++
	if ms > h.lastMs {
		h.lastMs = ms
	}
	h.tl.add(ms, h.count)
	return true
}

// cumulative returns the run's buckets as Prometheus sees them: cumulative
// counts by upper bound, the last +Inf.
func (h *histogram) cumulative() []Bucket {
	out := make([]Bucket, len(h.inc))
	acc := 0.0
	for i, c := range h.inc {
		acc += c
		le := math.Inf(1)
		if i < len(h.bounds) {
			le = h.bounds[i]
		}
		out[i] = Bucket{UpperBound: le, Count: acc}
	}
	return out
}

// mergeBuckets sums cumulative buckets by upper bound, as
// `sum by (le) (...)` does before histogram_quantile.
func mergeBuckets(sets ...[]Bucket) []Bucket {
	by := map[float64]float64{}
	for _, s := range sets {
		for _, b := range s {
			by[b.UpperBound] += b.Count
		}
	}
	out := make([]Bucket, 0, len(by))
	for le, c := range by {
		out = append(out, Bucket{UpperBound: le, Count: c})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UpperBound < out[j].UpperBound })
	return out
}
