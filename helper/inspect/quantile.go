package inspect

import (
	"math"
	"sort"
)

// Bucket is one cumulative bucket of a classic (explicit-bounds) histogram:
// Count observations were at most UpperBound (Prometheus' `le`).
type Bucket struct {
	UpperBound float64 `json:"le"`
	Count      float64 `json:"count"`
}

// BucketQuantile is the q-quantile of cumulative buckets computed as
// Prometheus' histogram_quantile does for classic histograms
// (promql/quantile.go, bucketQuantile): buckets are sorted by upper bound,
// equal bounds merged, counts within 1e-12 of each other made equal, and
// counts made monotonic; the quantile is interpolated linearly within its
// bucket, from 0 when the lowest bucket's bound is positive. A quantile in
// the +Inf bucket is the highest finite bound. NaN when q is NaN, when the
// highest bound is not +Inf, when there are fewer than 2 buckets or no
// observations; -Inf for q < 0 and +Inf for q > 1. buckets is sorted in place.
func BucketQuantile(q float64, buckets []Bucket) float64 {
	switch {
	case math.IsNaN(q):
		return math.NaN()
	case q < 0:
		return math.Inf(-1)
	case q > 1:
		return math.Inf(+1)
	case len(buckets) == 0:
		return math.NaN()
	}
	sort.SliceStable(buckets, func(i, j int) bool { return buckets[i].UpperBound < buckets[j].UpperBound })
	if !math.IsInf(buckets[len(buckets)-1].UpperBound, +1) {
		return math.NaN()
	}
	buckets = coalesce(buckets)
	correctPrecision(buckets, 1e-12)
	ensureMonotonic(buckets)
	if len(buckets) < 2 {
		return math.NaN()
	}
	observations := buckets[len(buckets)-1].Count
	if observations == 0 {
		return math.NaN()
	}
	rank := q * observations
	b := sort.Search(len(buckets)-1, func(i int) bool { return buckets[i].Count >= rank })
	if b == len(buckets)-1 {
		return buckets[len(buckets)-2].UpperBound
	}
	if b == 0 && buckets[0].UpperBound <= 0 {
		return buckets[0].UpperBound
	}
	start, end, count := 0.0, buckets[b].UpperBound, buckets[b].Count
	if b > 0 {
		start = buckets[b-1].UpperBound
		count -= buckets[b-1].Count
		rank -= buckets[b-1].Count
	}
	return start + (end-start)*(rank/count)
}

func coalesce(bs []Bucket) []Bucket {
	last, i := bs[0], 0
	for _, b := range bs[1:] {
		if b.UpperBound == last.UpperBound {
			last.Count += b.Count
			continue
		}
		bs[i] = last
		last = b
		i++
	}
	bs[i] = last
	return bs[:i+1]
}

func correctPrecision(bs []Bucket, tolerance float64) {
	prev := bs[0].Count
	for i := 1; i < len(bs); i++ {
		cur := bs[i].Count
		delta := math.Abs(cur - prev)
		if delta == 0 {
			continue
		}
		if delta/cur <= tolerance {
			bs[i].Count = prev
		} else {
			prev = cur
		}
	}
}

func ensureMonotonic(bs []Bucket) {
	max := bs[0].Count
	for i := 1; i < len(bs); i++ {
		if bs[i].Count > max {
			max = bs[i].Count
		} else if bs[i].Count < max {
			bs[i].Count = max
		}
	}
}

// SampleQuantile is the q-quantile of values as Prometheus' quantile_over_time
// computes it (promql/quantile.go, quantile): the weighted average of the two
// values around rank q*(n-1) of the sorted values. NaN for no values or q NaN,
// -Inf for q < 0, +Inf for q > 1. values is sorted in place.
func SampleQuantile(q float64, values []float64) float64 {
	switch {
	case len(values) == 0 || math.IsNaN(q):
		return math.NaN()
	case q < 0:
		return math.Inf(-1)
	case q > 1:
		return math.Inf(+1)
	}
	sort.Float64s(values)
	n := float64(len(values))
	rank := q * (n - 1)
	lo := math.Max(0, math.Floor(rank))
	hi := math.Min(n-1, lo+1)
	w := rank - math.Floor(rank)
	return values[int(lo)]*(1-w) + values[int(hi)]*w
}
