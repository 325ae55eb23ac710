package inspect

import (
	"math"
	"testing"
)

func inf() float64 { return math.Inf(1) }

// TestBucketQuantile: the cases of Prometheus' bucketQuantile
// (promql/quantile.go), worked by hand.
func TestBucketQuantile(t *testing.T) {
	b := func(pairs ...float64) []Bucket {
		var out []Bucket
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, Bucket{UpperBound: pairs[i], Count: pairs[i+1]})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		q    float64
		bs   []Bucket
		want float64
	}{
		{"in the first bucket, from 0", 0.5, b(0.1, 50, 0.2, 70, inf(), 100), 0.1},
		{"interpolated", 0.6, b(0.1, 50, 0.2, 70, inf(), 100), 0.15},
		{"in +Inf: the highest finite bound", 0.9, b(0.1, 50, 0.2, 70, inf(), 100), 0.2},
		{"unsorted input", 0.6, b(inf(), 100, 0.2, 70, 0.1, 50), 0.15},
		{"q 0", 0, b(0.1, 50, 0.2, 70, inf(), 100), 0},
		{"q 1: the highest finite bound", 1, b(0.1, 50, 0.2, 70, inf(), 100), 0.2},
		{"q < 0", -0.1, b(0.1, 50, inf(), 100), math.Inf(-1)},
		{"q > 1", 1.1, b(0.1, 50, inf(), 100), math.Inf(1)},
		{"q NaN", math.NaN(), b(0.1, 50, inf(), 100), math.NaN()},
		{"no +Inf bucket", 0.5, b(0.1, 50, 0.2, 100), math.NaN()},
		{"no observations", 0.5, b(0.1, 0, inf(), 0), math.NaN()},
		{"only +Inf", 0.5, b(inf(), 10), math.NaN()},
		{"lowest bound <= 0 returned", 0.25, b(-1, 10, 1, 15, inf(), 20), -1},
		{"negative buckets interpolate", 0.6, b(-1, 10, 1, 15, inf(), 20), -1 + 2*(2.0/5)},
		{"non-monotonic made monotonic", 0.5, b(0.1, 50, 0.2, 40, inf(), 100), 0.1},
		{"equal bounds merged", 0.5, b(0.1, 25, 0.1, 25, 0.2, 70, inf(), 100), 0.1},
		// vLLM's e2e buckets with 3 observations each of 0.31 0.42 0.75
		// 0.9 1.2 1.7 2.2 4.0 (the stand-in's cycle, 24 requests).
		{"vllm e2e p50", 0.5, b(0.3, 0, 0.5, 6, 0.8, 9, 1, 12, 1.5, 15, 2, 18, 2.5, 21, 5, 24, 10, 24, inf(), 24), 1.0},
		{"vllm e2e p90", 0.9, b(0.3, 0, 0.5, 6, 0.8, 9, 1, 12, 1.5, 15, 2, 18, 2.5, 21, 5, 24, 10, 24, inf(), 24), 3.0},
		{"vllm e2e p99", 0.99, b(0.3, 0, 0.5, 6, 0.8, 9, 1, 12, 1.5, 15, 2, 18, 2.5, 21, 5, 24, 10, 24, inf(), 24), 4.8},
	} {
		got := BucketQuantile(tc.q, tc.bs)
		if !(got == tc.want || math.Abs(got-tc.want) < 1e-9 || (math.IsNaN(got) && math.IsNaN(tc.want))) {
			t.Errorf("%s: BucketQuantile(%v) = %v, want %v", tc.name, tc.q, got, tc.want)
		}
	}
}

// TestSampleQuantile: Prometheus' quantile_over_time weighting.
func TestSampleQuantile(t *testing.T) {
	for _, tc := range []struct {
		q    float64
		vs   []float64
		want float64
	}{
		{0.5, []float64{4, 1, 3, 2}, 2.5},
		{0.99, []float64{1, 2, 3, 4}, 3.97},
		{0, []float64{5, 7}, 5},
		{1, []float64{5, 7}, 7},
		{0.5, []float64{9}, 9},
		{0.5, nil, math.NaN()},
		{-1, []float64{1}, math.Inf(-1)},
		{2, []float64{1}, math.Inf(1)},
	} {
		got := SampleQuantile(tc.q, tc.vs)
		if !(math.Abs(got-tc.want) < 1e-9 || got == tc.want || (math.IsNaN(got) && math.IsNaN(tc.want))) {
			t.Errorf("SampleQuantile(%v, %v) = %v, want %v", tc.q, tc.vs, got, tc.want)
		}
	}
}
