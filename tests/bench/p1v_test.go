package main

import "testing"

// TestBootRatio: the bootstrap interval of a ratio of medians holds the
// true ratio of two samples drawn from scaled copies of one set, is
// exactly 1 for identical constant samples, and is (0, 0) for an empty one.
func TestBootRatio(t *testing.T) {
	var a, b []float64
	for i := 0; i < 200; i++ {
		x := 0.030 + 0.0001*float64((i*37)%101)
		a, b = append(a, 1.5*x), append(b, x)
	}
	lo, hi := bootRatio(a, b, 2000)
	if !(lo <= 1.5 && hi >= 1.5) || hi-lo > 0.2 {
		t.Errorf("interval %.3f-%.3f, want one holding 1.5, narrower than 0.2", lo, hi)
	}
	c := []float64{0.05, 0.05, 0.05}
	if lo, hi := bootRatio(c, c, 100); lo != 1 || hi != 1 {
		t.Errorf("constant samples: %v-%v, want 1-1", lo, hi)
	}
	if lo, hi := bootRatio(nil, c, 100); lo != 0 || hi != 0 {
		t.Errorf("empty sample: %v-%v", lo, hi)
	}
}
