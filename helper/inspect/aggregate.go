package inspect

import (
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"

	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
	"github.com/gym-otel-spank/gym-otel-spank/helper/gpudev"
)

// Metric names the report reads, as they are in the files: the collector
// turns `vllm:` into `vllm_` (a `vllm:` name from elsewhere is read the
// same way). vLLM's names are those of its Prometheus exporter (v1 engine;
// vllm_gpu_cache_usage_perc is the v0 name of the KV-cache gauge),
// dcgm-exporter's those of its default counters, node_exporter's its
// own. NeMo Gym's names (gym.*) are those its nemo-lens telemetry is
// believed to use: they are not in Gym's public source, and follow this
// project's Gym stand-in.
const (
	mPromptTokens   = "vllm_prompt_tokens_total"
	mGenTokens      = "vllm_generation_tokens_total"
	mRequestSuccess = "vllm_request_success_total"
	mRunning        = "vllm_num_requests_running"
	mWaiting        = "vllm_num_requests_waiting"
	mKVCache        = "vllm_kv_cache_usage_perc"
	mKVCacheV0      = "vllm_gpu_cache_usage_perc"
	mE2E            = "vllm_e2e_request_latency_seconds"
	mTTFT           = "vllm_time_to_first_token_seconds"
	mGPUUtil        = "DCGM_FI_DEV_GPU_UTIL"
	mFBUsed         = "DCGM_FI_DEV_FB_USED"
	mFBFree         = "DCGM_FI_DEV_FB_FREE"
	mPower          = "DCGM_FI_DEV_POWER_USAGE"
	mCPUSeconds     = "node_cpu_seconds_total"
	mMemTotal       = "node_memory_MemTotal_bytes"
	mMemAvailable   = "node_memory_MemAvailable_bytes"
	mLoad1          = "node_load1"
	mUp             = "up"
	mRolloutMs      = "gym.rollout.duration_ms"
	mVerifyCount    = "gym.verify.count"
	mSpanCalls      = "traces.span.metrics.calls"
	mSpanDuration   = "traces.span.metrics.duration"

	spanRollout = "gym.rollout"
	spanVerify  = "gym.verify"
)

var tracked = map[string]bool{
	mPromptTokens: true, mGenTokens: true, mRequestSuccess: true, mRunning: true, mWaiting: true,
	mKVCache: true, mKVCacheV0: true, mE2E: true, mTTFT: true, mGPUUtil: true, mFBUsed: true,
	mFBFree: true, mPower: true, mCPUSeconds: true, mMemTotal: true, mMemAvailable: true,
	mLoad1: true, mUp: true, mRolloutMs: true, mVerifyCount: true, mSpanCalls: true, mSpanDuration: true,
}

// Bounds on what the report keeps, whatever the size of the files.
const (
	maxSeries        = 20000 // metric series tracked
	maxSpanNames     = 500   // span names with their own statistics
	spanReservoir    = 4096  // span durations kept per name for quantiles
	topSpans         = 10    // slowest spans listed
	maxExamples      = 20    // error spans and error log records listed
	maxMetricNames   = 5000  // metric names listed
	maxIdentityValue = 50    // values kept per identity attribute
	maxIdentityHosts = 4096  // values kept of host.name: a job's nodes, shown as one hostlist
)

// seriesKey names one series: a metric on a node from a producer
// (service.name.override) and instance (service.instance.id), with its
// point attributes in canonical order.
type seriesKey struct {
	metric, node, producer, instance, labels string
}

type series struct {
	key    seriesKey
	labels map[string]string
	c      *counter
	g      *gauge
	h      *histogram
}

// spanStat is what the report keeps of the spans of one name and producer.
type spanStat struct {
	name, producer string
	count, errors  int
	totalMs, maxMs float64
	minMs          float64
	sample         []float64 // a uniform reservoir of durations (ms)
	rng            *rand.Rand
}

func (s *spanStat) add(ms float64) {
	s.count++
	s.totalMs += ms
	if s.count == 1 || ms < s.minMs {
		s.minMs = ms
	}
	if ms > s.maxMs {
		s.maxMs = ms
	}
	if len(s.sample) < spanReservoir {
		s.sample = append(s.sample, ms)
		return
	}
	if j := s.rng.IntN(s.count); j < spanReservoir {
		s.sample[j] = ms
	}
}

// dirStat counts what one node dir held.
type dirStat struct {
	src                 Source
	node                string
	lines, bad          map[string]int
	points, spans, logs int
	firstBad            map[string]string
	// writing is each file's last line without a newline in bytes, read
	// while the collector runs (it is being written).
	writing         map[string]int
	firstMs, lastMs int64
	up              map[[2]string]*scrapeLog // (job, instance) -> its scrapes
	scrape          map[[2]string]*scrapeStat
	sampleLimit     map[[2]string]int64 // (job, instance) -> sample_limit of collector.yaml
}

// aggregator holds the bounded state of a report while the files stream.
type aggregator struct {
	series      map[seriesKey]*series
	order       []*series
	droppedSer  int
	skipped     int // points skipped (bounds changed, unreadable)
	metricNames map[string]int
	identity    map[string][]AttrValue
	producers   map[string]int
	firstMs     int64
	lastMs      int64

	spans        map[[2]string]*spanStat
	otherSpans   *spanStat
	slowest      []SlowSpan
	errorSpans   int
	errorSpanEx  []ErrorSpan
	verifySpans  map[string]int // verify result -> spans
	rolloutFirst int64          // the first gym.rollout span's start (unix ms)
	rolloutLast  int64          // the last one's end
	logsBySev    map[string]int
	errorLogs    int
	errorLogEx   []ErrorLog
	dirs         []*dirStat
	cur          *dirStat
	prodNames    map[string][]string        // producer -> metric names it sent (bounded)
	scraped      map[string]bool            // producers with `up` points (scrape targets)
	power        map[*series]*integral      // DCGM_FI_DEV_POWER_USAGE series' energy (energy.go)
	recorded     map[string][]gpudev.Device // per node, the job's GPUs by device (gpumatch.go)
	samples      map[*series]*sampled       // raw energy, power and token samples (stepenergy.go)
	rng          *rand.Rand

	rolloutFirstNode string                  // the node of the first gym.rollout span
	phaseNodes       map[phaseKey]*phaseNode // the Slurm phase spans by node (phases.go)
	phaseOrder       []*phaseNode
	phasesDropped    int                // phase spans of nodes past maxPhaseNodes
	cgGroups         map[cgKey]*cgGroup // the cgroup readings' groups (cgroups.go)
	cgDropped        int                // cgroup points of groups past maxCgroupGroups
	// Spans of the phase scope and points of the cgroup readings'
	// names without the plugin's mark (contract.SourceKey): sent by the
	// job, not Slurm's (JobLookalikes).
	lookalikeSpans, lookalikePoints int
	phaseSpans                      int // the plugin's phase spans (marked), shown as the phases
	// tree is what the trace tree keeps while reading (tree.go).
	tree *treeState
	// startup keeps Gym's start-up spans while reading (gymnewer.go).
	startup *startupState
}

func newAggregator() *aggregator {
	return &aggregator{
		series: map[seriesKey]*series{}, metricNames: map[string]int{}, identity: map[string][]AttrValue{},
		producers: map[string]int{}, spans: map[[2]string]*spanStat{}, verifySpans: map[string]int{},
		logsBySev: map[string]int{}, rng: rand.New(rand.NewPCG(1, 2)),
		phaseNodes: map[phaseKey]*phaseNode{}, cgGroups: map[cgKey]*cgGroup{}, tree: newTreeState(),
	}
}

func (a *aggregator) seen(ms int64) {
	if ms <= 0 {
		return
	}
	if a.firstMs == 0 || ms < a.firstMs {
		a.firstMs = ms
	}
	if ms > a.lastMs {
		a.lastMs = ms
	}
	d := a.cur
	if d.firstMs == 0 || ms < d.firstMs {
		d.firstMs = ms
	}
	if ms > d.lastMs {
		d.lastMs = ms
	}
}

// resourceInfo reads a resource's node, producer and instance and notes
// its identity attributes.
func (a *aggregator) resourceInfo(r resource, items int) (node, producer, instance string) {
	producer = "(none)"
	for _, at := range r.Attributes {
		v := at.Value.text()
		switch at.Key {
		case "host.name":
			node = v
		case "service.name.override":
			producer = v
		case "service.instance.id":
			instance = v
		}
		for _, k := range identityKeys {
			if at.Key != k {
				continue
			}
			av, ok := attrValue(at.Value)
			if !ok {
				continue
			}
			limit := maxIdentityValue
			if k == "host.name" {
				limit = maxIdentityHosts
			}
			if !slices.Contains(a.identity[k], av) && len(a.identity[k]) < limit {
				a.identity[k] = append(a.identity[k], av)
			}
		}
	}
	if a.cur.src.Node != "" {
		node = a.cur.src.Node // the dir names its node
	} else if node == "" {
		node = "(first node)"
	}
	if a.cur.node == "" {
		a.cur.node = node
	}
	a.producers[producer] += items
	return node, producer, instance
}

func labelString(as attrs) (string, map[string]string) {
	if len(as) == 0 {
		return "", nil
	}
	m := make(map[string]string, len(as))
	keys := make([]string, 0, len(as))
	for _, x := range as {
		m[x.Key] = x.Value.text()
		keys = append(keys, x.Key)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(m[k])
	}
	return b.String(), m
}

func (a *aggregator) get(metric, node, producer, instance string, as attrs) *series {
	ls, m := labelString(as)
	k := seriesKey{metric, node, producer, instance, ls}
	s := a.series[k]
	if s == nil {
		if len(a.series) >= maxSeries {
			a.droppedSer++
			return nil
		}
		s = &series{key: k, labels: m}
		a.series[k] = s
		a.order = append(a.order, s)
	}
	return s
}

func normName(n string) string {
	if strings.HasPrefix(n, "vllm:") {
		return "vllm_" + n[len("vllm:"):]
	}
	return n
}

func (a *aggregator) metrics(l *otlpLine) {
	for _, rm := range l.ResourceMetrics {
		n := 0
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				n += pointCount(m)
			}
		}
		a.cur.points += n
		node, producer, instance := a.resourceInfo(rm.Resource, n)
		slurm := fromPlugin(rm.Resource)
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				name := normName(m.Name)
				if _, ok := a.metricNames[name]; ok || len(a.metricNames) < maxMetricNames {
					a.metricNames[name] += pointCount(m)
				}
				a.noteName(producer, name)
				a.metric(name, m, node, producer, instance, slurm)
			}
		}
	}
}

func pointCount(m metric) int {
	n := 0
	if m.Sum != nil {
		n += len(m.Sum.DataPoints)
	}
	if m.Gauge != nil {
		n += len(m.Gauge.DataPoints)
	}
	if m.Histogram != nil {
		n += len(m.Histogram.DataPoints)
	}
	if m.ExponentialHistogram != nil {
		n += len(m.ExponentialHistogram.DataPoints)
	}
	if m.Summary != nil {
		n += len(m.Summary.DataPoints)
	}
	return n
}

// metric takes one metric of a resource; slurm says whether the resource
// carries the plugin's mark (fromPlugin).
func (a *aggregator) metric(name string, m metric, node, producer, instance string, slurm bool) {
	if producer == cgroupJob && strings.HasPrefix(name, vocab.CgroupPrefix) && !slurm {
		// Looks like the cgroup readings', but the job sent it: kept as
		// the job's own series, never as its cgroups.
		a.lookalikePoints += pointCount(m)
	} else if producer == cgroupJob && strings.HasPrefix(name, vocab.CgroupPrefix) {
		// The job's cgroups (cgroups.go).
		if m.Gauge != nil {
			for _, p := range m.Gauge.DataPoints {
				a.cgroupPoint(name, node, p)
			}
		}
		if m.Sum != nil {
			for _, p := range m.Sum.DataPoints {
				a.cgroupPoint(name, node, p)
			}
		}
	}
	if m.Gauge != nil {
		for _, p := range m.Gauge.DataPoints {
			if v, ok := p.value(); ok {
				a.cur.scrapeReport(name, producer, instance, p.Time.ms(), v)
			}
		}
	}
	if !tracked[name] {
		// Still part of the run's time span.
		if m.Gauge != nil && len(m.Gauge.DataPoints) > 0 {
			a.seen(m.Gauge.DataPoints[0].Time.ms())
		}
		return
	}
	switch {
	case m.Sum != nil && upDownNames[name] && !m.Sum.IsMonotonic && m.Sum.Temporality != temporalityDelta:
		// An up-down counter: its cumulative value is the current one.
		for _, p := range m.Sum.DataPoints {
			if v, ok := p.value(); ok {
				a.seen(p.Time.ms())
				if s := a.get(name, node, producer, instance, p.Attributes); s != nil {
					if s.g == nil {
						s.g = &gauge{}
					}
					s.g.add(p.Time.ms(), v)
				}
			}
		}
	case m.Sum != nil:
		for _, p := range m.Sum.DataPoints {
			v, ok := p.value()
			if !ok {
				continue
			}
			a.seen(p.Time.ms())
			s := a.get(name, node, producer, instance, p.Attributes)
			if s == nil {
				continue
			}
			if s.c == nil {
				s.c = &counter{}
			}
			if m.Sum.Temporality == temporalityDelta {
				s.c.addDelta(p.Time.ms(), v)
			} else {
				if name == mEnergy || name == mGenTokens || name == mHostEnergy {
					a.keepSample(s, p.Time.ms(), v, true)
				}
				s.c.add(p.Time.ms(), v)
			}
		}
	case m.Gauge != nil:
		for _, p := range m.Gauge.DataPoints {
			v, ok := p.value()
			if !ok {
				continue
			}
			a.seen(p.Time.ms())
			if name == mUp {
				// The Prometheus receiver's scrape result: counted per
				// node dir and target for the health section.
				k := [2]string{producer, instance}
				c := a.cur.up[k]
				if c == nil {
					c = &scrapeLog{}
					a.cur.up[k] = c
				}
				c.add(p.Time.ms(), v == 1)
			}
			s := a.get(name, node, producer, instance, p.Attributes)
			if s == nil {
				continue
			}
			if s.g == nil {
				s.g = &gauge{}
			}
			s.g.add(p.Time.ms(), v)
			if name == mPower {
				a.integratePower(s, p.Time.ms(), v)
				a.keepSample(s, p.Time.ms(), v, false)
			}
			if name == mHostPower {
				a.keepSample(s, p.Time.ms(), v, false)
			}
		}
	case m.Histogram != nil:
		for _, p := range m.Histogram.DataPoints {
			if p.Flags&1 != 0 {
				continue
			}
			a.seen(p.Time.ms())
			s := a.get(name, node, producer, instance, p.Attributes)
			if s == nil {
				continue
			}
			if s.h == nil {
				s.h = &histogram{}
			}
			counts := make([]float64, len(p.BucketCounts))
			for i, c := range p.BucketCounts {
				counts[i] = float64(c)
			}
			var mm minMax
			if p.Max != nil {
				mm.max, mm.hasMax = float64(*p.Max), true
			}
			if p.Min != nil {
				mm.min, mm.hasMin = float64(*p.Min), true
			}
			first, delta := s.h.n == 0, m.Histogram.Temporality == temporalityDelta
			if !s.h.add(p.Time.ms(), p.ExplicitBounds, counts, float64(p.Count), float64(p.Sum), mm, delta) {
				a.skipped++
			} else if first && !delta {
				s.h.startMs = p.Start.ms()
			}
		}
	}
}

func (a *aggregator) traces(l *otlpLine) {
	for _, rs := range l.ResourceSpans {
		n := 0
		for _, ss := range rs.ScopeSpans {
			n += len(ss.Spans)
		}
		a.cur.spans += n
		node, producer, _ := a.resourceInfo(rs.Resource, n)
		slurm := fromPlugin(rs.Resource)
		for _, ss := range rs.ScopeSpans {
			if ss.Scope.Name == contract.PhaseScope && !slurm {
				// The phase scope without the plugin's mark: the
				// job sent these, so they are the job's own spans.
				a.lookalikeSpans += len(ss.Spans)
			} else if ss.Scope.Name == contract.PhaseScope {
				// The job's Slurm phases: counted as items, shown
				// as the phase timeline (phases.go), not ranked with
				// the job's own spans.
				restart := rs.Resource.Attributes.get("slurm_job_restart_count")
				a.phaseSpans += len(ss.Spans)
				for i := range ss.Spans {
					a.phase(&ss.Spans[i], node, restart)
				}
				continue
			}
			ident := resourceIdent(node, producer, rs.Resource)
			for i := range ss.Spans {
				a.span(&ss.Spans[i], node, producer)
				a.treeSpan(&ss.Spans[i], node, producer, ident)
			}
		}
	}
}

// fromPlugin reports whether r carries the plugin's mark
// (contract.SourceKey=contract.SourceSlurm), which the node's collector
// stamps on the supervisor's own telling only and deletes from whatever
// the job's tasks send.
func fromPlugin(r resource) bool {
	for _, at := range r.Attributes {
		if at.Key == contract.SourceKey {
			return at.Value.StringValue != nil && *at.Value.StringValue == contract.SourceSlurm
		}
	}
	return false
}

func (a *aggregator) span(sp *span, node, producer string) {
	a.seen(sp.Start.ms())
	a.seen(sp.End.ms())
	ms := float64(sp.End-sp.Start) / 1e6
	if ms < 0 {
		ms = 0
	}
	k := [2]string{sp.Name, producer}
	st := a.spans[k]
	if st == nil {
		if len(a.spans) >= maxSpanNames {
			if a.otherSpans == nil {
				a.otherSpans = &spanStat{name: "(other names)", producer: "", rng: a.rng}
			}
			st = a.otherSpans
		} else {
			st = &spanStat{name: sp.Name, producer: producer, rng: a.rng}
			a.spans[k] = st
		}
	}
	st.add(ms)
	isErr := sp.Status.Code == statusError
	if isErr {
		st.errors++
		a.errorSpans++
		if len(a.errorSpanEx) < maxExamples {
			a.errorSpanEx = append(a.errorSpanEx, ErrorSpan{Name: sp.Name, Producer: producer, Node: node,
				TraceID: sp.TraceID, SpanID: sp.SpanID, Message: sp.Status.Message, Start: unixMs(sp.Start.ms())})
		}
	}
	if sp.Name == spanRollout {
		if st, en := sp.Start.ms(), sp.End.ms(); st > 0 && en >= st {
			if a.rolloutFirst == 0 || st < a.rolloutFirst {
				a.rolloutFirst, a.rolloutFirstNode = st, node
			}
			if en > a.rolloutLast {
				a.rolloutLast = en
			}
		}
	}
	if sp.Name == spanVerify {
		a.verifySpans[verifyResult(sp)]++
	}
	a.startupSpanSeen(sp, node)
	// The slowest spans: a small sorted list.
	if len(a.slowest) < topSpans || ms > a.slowest[len(a.slowest)-1].DurationMs {
		s := SlowSpan{Name: sp.Name, Producer: producer, Node: node, TraceID: sp.TraceID, SpanID: sp.SpanID,
			DurationMs: ms, Start: unixMs(sp.Start.ms()), Error: isErr}
		i := sort.Search(len(a.slowest), func(i int) bool { return a.slowest[i].DurationMs < ms })
		a.slowest = append(a.slowest, SlowSpan{})
		copy(a.slowest[i+1:], a.slowest[i:])
		a.slowest[i] = s
		if len(a.slowest) > topSpans {
			a.slowest = a.slowest[:topSpans]
		}
	}
}

// errorSeverity is SEVERITY_NUMBER_ERROR: records at or above it are errors.
const errorSeverity = 17

func (a *aggregator) logs(l *otlpLine) {
	for _, rl := range l.ResourceLogs {
		n := 0
		for _, sl := range rl.ScopeLogs {
			n += len(sl.LogRecords)
		}
		a.cur.logs += n
		node, producer, _ := a.resourceInfo(rl.Resource, n)
		for _, sl := range rl.ScopeLogs {
			for _, r := range sl.LogRecords {
				t := r.Time
				if t == 0 {
					t = r.Observed
				}
				a.seen(t.ms())
				sev := strings.ToUpper(r.SeverityText)
				if sev == "" {
					sev = severityName(r.SeverityNumber)
				}
				a.logsBySev[sev]++
				if r.SeverityNumber >= errorSeverity || sev == "ERROR" || sev == "FATAL" || sev == "CRITICAL" {
					a.errorLogs++
					if len(a.errorLogEx) < maxExamples {
						body := r.Body.text()
						if len(body) > 500 {
							body = body[:500] + "..."
						}
						a.errorLogEx = append(a.errorLogEx, ErrorLog{Time: unixMs(t.ms()), Node: node, Producer: producer,
							Severity: sev, Body: body, TraceID: r.TraceID, SpanID: r.SpanID})
					}
				}
			}
		}
	}
}

// severityName is the short name of an OTLP severity number range.
func severityName(n int) string {
	switch {
	case n <= 0:
		return "(unset)"
	case n <= 4:
		return "TRACE"
	case n <= 8:
		return "DEBUG"
	case n <= 12:
		return "INFO"
	case n <= 16:
		return "WARN"
	case n <= 20:
		return "ERROR"
	}
	return "FATAL"
}

var (
	nan    = math.NaN()
	posInf = math.Inf(1)
	negInf = math.Inf(-1)
)

// byMetric returns the tracked series of a metric, in first-seen order.
func (a *aggregator) byMetric(name string) []*series {
	var out []*series
	for _, s := range a.order {
		if s.key.metric == name {
			out = append(out, s)
		}
	}
	return out
}
