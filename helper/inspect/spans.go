package inspect

import (
	"sort"
)

func (a *aggregator) spanReport() Spans {
	sp := Spans{ByName: []SpanName{}, ByP99: []SpanName{}, Slowest: a.slowest, SpanMetrics: []SpanMetric{}}
	if sp.Slowest == nil {
		sp.Slowest = []SlowSpan{}
	}
	all := make([]*spanStat, 0, len(a.spans)+1)
	for _, st := range a.spans {
		all = append(all, st)
	}
	if a.otherSpans != nil {
		all = append(all, a.otherSpans)
	}
	for _, st := range all {
		sp.Total += st.count
		sp.ByName = append(sp.ByName, SpanName{Name: st.name, Producer: st.producer, TotalMs: st.totalMs, Errors: st.errors,
			Duration: sampleQuantiles(st.sample, st.count, st.totalMs, st.minMs, st.maxMs)})
	}
	sort.Slice(sp.ByName, func(i, j int) bool {
		if sp.ByName[i].TotalMs != sp.ByName[j].TotalMs {
			return sp.ByName[i].TotalMs > sp.ByName[j].TotalMs
		}
		return sp.ByName[i].Name < sp.ByName[j].Name
	})
	sp.ByP99 = append(sp.ByP99, sp.ByName...)
	sort.SliceStable(sp.ByP99, func(i, j int) bool { return sp.ByP99[i].Duration.P99 > sp.ByP99[j].Duration.P99 })
	// Span metrics: by span.name over every node and producer.
	type smAcc struct {
		calls float64
		sets  [][]Bucket
		sum   histSummary
	}
	var names []string
	by := map[string]*smAcc{}
	for _, s := range a.order {
		if s.key.metric != mSpanCalls && s.key.metric != mSpanDuration {
			continue
		}
		n := s.labels["span.name"]
		if by[n] == nil {
			by[n] = &smAcc{}
			names = append(names, n)
		}
		x := by[n]
		if s.c != nil {
			x.calls += s.c.total()
		}
		if s.h != nil {
			x.sets = append(x.sets, s.h.cumulative())
			x.sum.add(s.h)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		x := by[n]
		m := SpanMetric{Name: n, Calls: Value(x.calls), Duration: unknownQ(), DurationFrom: "histogram"}
		if len(x.sets) > 0 {
			m.Duration = histQuantiles(mergeBuckets(x.sets...), x.sum)
		}
		// The raw spans, where traces.jsonl has them, say more than the
		// connector's buckets.
		var raw []*spanStat
		for k, st := range a.spans {
			if k[0] == n {
				raw = append(raw, st)
				m.Spans += st.count
			}
		}
		if m.Spans > 0 {
			m.Duration, m.DurationFrom = spanQuantiles(raw), "spans"
		}
		sp.SpanMetrics = append(sp.SpanMetrics, m)
	}
	return sp
}
