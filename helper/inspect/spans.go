package inspect

import (
	"fmt"
	"sort"
	"strconv"
)

func (a *aggregator) spanReport() Spans {
	sp := Spans{ByName: []SpanName{}, ByP99: []SpanName{}, Slowest: a.slowest, SpanMetrics: []SpanMetric{}, PhaseSpans: a.phaseSpans}
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
	sp.InFiles = sp.Total + sp.PhaseSpans
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
		m.ConnectorCalls = m.Calls
		m.CallsNote = callsNote(x.calls, x.sum.count, m.Spans)
		m.Calls = Value(max(x.calls, x.sum.count, float64(m.Spans)))
		sp.SpanMetrics = append(sp.SpanMetrics, m)
	}
	return sp
}

// callsNote says why a span name's calls are not the connector's call
// counter (calls) when it is below the connector's duration count (count)
// or the raw spans of that name (spans): the connector starts a new
// series at 0, carries its count one flush later and exports nothing at
// its shutdown, so a name first seen in a collector run's last seconds
// may end with calls 0 while its histogram, or traces.jsonl, counts it.
// "" when calls is the largest of the three.
func callsNote(calls, count float64, spans int) string {
	if calls >= count && calls >= float64(spans) {
		return ""
	}
	from := "its duration histogram's count"
	n := count
	if float64(spans) > count {
		from, n = "its raw spans in traces.jsonl", float64(spans)
	}
	return fmt.Sprintf("the connector's calls (%s) are below %s (%s): calls is the larger; "+
		"the connector counts a new series from its second flush and a collector that stopped before it left the count unsent",
		strconv.FormatFloat(calls, 'f', -1, 64), from, strconv.FormatFloat(n, 'f', -1, 64))
}
