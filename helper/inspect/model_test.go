package inspect

import (
	"math"
	"testing"
)

// TestCounterReset: a value below the previous one is a reset (the server
// restarted); the run's total goes on from the value before it, and the
// rate is the increase between the first and last point over that time.
func TestCounterReset(t *testing.T) {
	var c counter
	for i, v := range []float64{10, 20, 30, 5, 15, 15} {
		c.add(int64(1000*(i+1)), v)
	}
	c.add(3000, 99) // an older point: ignored
	if c.total() != 45 || c.resets != 1 {
		t.Errorf("total %v resets %d, want 45 (30 before the reset + 15) and 1", c.total(), c.resets)
	}
	// (45 - 10) over 5 s.
	if r := c.rate(); math.Abs(r-7) > 1e-9 {
		t.Errorf("rate %v, want 7/s", r)
	}
	rs := c.rates()
	if len(rs) != 5 || rs[2][1] != 5 || rs[4][1] != 0 {
		t.Errorf("rates %v: want 5 intervals, 5/s across the reset, 0 at the end", rs)
	}
	var d counter
	d.addDelta(1000, 3)
	d.addDelta(2000, 4)
	if d.total() != 7 {
		t.Errorf("delta total %v, want 7", d.total())
	}
}

// TestHistogramReset: bucket increases over the run, a reset counted from
// zero, a point with other bounds skipped.
func TestHistogramReset(t *testing.T) {
	var h histogram
	bounds := []float64{1, 2}
	steps := []struct {
		counts []float64
		count  float64
	}{
		{[]float64{1, 0, 0}, 1},
		{[]float64{2, 1, 0}, 3},
		{[]float64{0, 1, 1}, 2}, // reset: a new process
		{[]float64{0, 2, 1}, 3},
	}
	for i, s := range steps {
		if !h.add(int64(1000*(i+1)), bounds, s.counts, s.count, s.count, minMax{}, false) {
			t.Fatal("point refused")
		}
	}
	if h.add(9000, []float64{1, 3}, []float64{1, 1, 1}, 3, 3, minMax{}, false) {
		t.Error("a point with other bounds was taken")
	}
	want := []float64{2, 3, 1} // 2 then 0 in (..1]; 1, then 1+1 in (1,2]; 1 above
	for i := range want {
		if h.inc[i] != want[i] {
			t.Fatalf("increases %v, want %v", h.inc, want)
		}
	}
	if h.count != 6 {
		t.Errorf("count %v, want 6", h.count)
	}
	bs := h.cumulative()
	if len(bs) != 3 || bs[2].Count != 6 || !math.IsInf(bs[2].UpperBound, 1) {
		t.Errorf("cumulative %v", bs)
	}
}

// TestTimelineBounded: a long series keeps at most maxTimeline points,
// from its first to its last.
func TestTimelineBounded(t *testing.T) {
	var tl timeline
	for i := 0; i < 100000; i++ {
		tl.add(int64(i), float64(i))
	}
	if len(tl.pts) > maxTimeline || len(tl.pts) < maxTimeline/2 {
		t.Errorf("%d points kept", len(tl.pts))
	}
	if tl.pts[0][0] != 0 || tl.pts[len(tl.pts)-1][0] != 99999 {
		t.Errorf("first %v last %v", tl.pts[0], tl.pts[len(tl.pts)-1])
	}
	for i := 1; i < len(tl.pts); i++ {
		if tl.pts[i][0] <= tl.pts[i-1][0] {
			t.Fatalf("not in order at %d: %v", i, tl.pts[i-1:i+1])
		}
	}
}
