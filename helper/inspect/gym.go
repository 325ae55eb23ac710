package inspect

import (
	"math"
)

func (a *aggregator) gym() Gym {
	g := Gym{Verify: map[string]float64{}, VerifySpans: a.verifySpans, RolloutRate: map[string][]Point{}, RolloutsOverTime: map[string][]Point{},
		RolloutsPerMinute: Value(math.NaN()), VerifySuccess: Value(math.NaN())}
	var rollouts, verifies []*spanStat
	for k, st := range a.spans {
		switch k[0] {
		case spanRollout:
			rollouts = append(rollouts, st)
		case spanVerify:
			verifies = append(verifies, st)
		}
	}
	g.RolloutSpans, g.VerifyLatency = spanQuantiles(rollouts), spanQuantiles(verifies)
	var sets [][]Bucket
	var hs histSummary
	for _, s := range a.byMetric(mRolloutMs) {
		if s.h == nil {
			continue
		}
		sets = append(sets, s.h.cumulative())
		hs.add(s.h)
		k := s.key.node + " " + s.key.producer
		// A cumulative series counts from its start time: the rollouts
		// of its first point are those since then, the first interval
		// of the rate (0 at the start, not a rate dropped).
		pts := s.h.tl.pts
		if st := s.h.startMs; st > 0 && len(pts) > 0 && float64(st) < pts[0][0] {
			pts = append([][2]float64{{float64(st), 0}}, pts...)
		}
		g.RolloutsOverTime[k] = append(g.RolloutsOverTime[k], points(pts)...)
		c := &counter{}
		for _, p := range pts {
			c.add(int64(p[0]), p[1])
		}
		g.RolloutRate[s.key.node] = append(g.RolloutRate[s.key.node], points(c.rates())...)
	}
	g.RolloutHistogram = unknownQ()
	if len(sets) > 0 {
		g.RolloutHistogram = histQuantiles(mergeBuckets(sets...), hs)
	}
	g.RolloutsCounted, g.RolloutsWindowSeconds = Value(math.NaN()), Value(math.NaN())
	count := hs.count
	// Rollouts per minute: the rollout spans over the time from the first
	// one's start to the last one's end; without spans, the histogram's
	// count over the run's time span.
	switch {
	case g.RolloutSpans.Count > 0 && a.rolloutLast > a.rolloutFirst:
		g.RolloutsCounted, g.RolloutsWindowSeconds = g.RolloutSpans.Count, Value(float64(a.rolloutLast-a.rolloutFirst)/1000)
	case count > 0 && a.lastMs > a.firstMs:
		g.RolloutsCounted, g.RolloutsWindowSeconds = Value(count), Value(float64(a.lastMs-a.firstMs)/1000)
	}
	if g.RolloutsWindowSeconds.Known() {
		g.RolloutsPerMinute = g.RolloutsCounted / g.RolloutsWindowSeconds * 60
	}
	for _, s := range a.byMetric(mVerifyCount) {
		if s.c != nil {
			g.Verify[orNone(s.labels["result"])] += s.c.total()
		}
	}
	pass, all := 0.0, 0.0
	for r, n := range g.Verify {
		all += n
		if r == "pass" {
			pass += n
		}
	}
	if all == 0 {
		for r, n := range g.VerifySpans {
			all += float64(n)
			if r == "pass" {
				pass += float64(n)
			}
		}
	}
	if all > 0 {
		g.VerifySuccess = Value(pass / all)
	}
	a.gymTelemetry(&g)
	return g
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
