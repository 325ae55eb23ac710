package supervise

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	commonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	resourcev1 "go.opentelemetry.io/proto/otlp/resource/v1"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
)

// The job's Slurm phases as spans (issue 28), emitted by the supervisor
// (the job's user) to its own collector's OTLP/HTTP receiver, which stamps
// the run's identity (resource/identity: the seed's keys and Lens' join
// key nv.dl.job.uuid) on them as on every span of the job.
//
// Root's side only hands facts on: the prolog's start time comes in the
// supervisor's environment (launch.EnvPrologStart, taken by the plugin's C prolog
// before it loads the Go core); each step's slurmstepd (spank/phase.c, C
// only, never in a forked task) tells the supervisor on its control socket
// (controlsock.go) one line at the step's start and one at its end:
//
//	step start <step id> <unix ms>
//	step end <step id> <start ms> <end ms> <tasks end ms|0> <final wait end ms|0> <exit code|-1> <signal|0> <tasks>
//
// and reads "ok"; the start's answer is "ok <traceparent>" when the step
// has a span to run its tasks in (stepStart), which the step sets as its
// tasks' TRACEPARENT (spank/taskenv.c) unless one is set already. Only root's lines count (slurmstepd's; controlsock.go):
// no other user, the job's own neither, can connect to the control socket,
// and a step line of any other peer gets no answer and makes no span, so
// no process of the job can add a step that never ran.
//
// One trace per job run: its trace id is a hash of the run's identity
// (cluster, job id, restart count, SLUID), the same on every node, so
// every node's spans sit in one trace. On each node one root span,
// slurm.job, runs from the prolog's start to the drain; under it
// slurm.prolog (the prolog's start to the collector's ready) and one
// slurm.step per step (the extern step too); under the batch step
// slurm.batch_script (to its task's exit) and slurm.final_wait (to the end
// of the plugin's final-scrape hold). Spans the node cannot finish (a step
// whose end never came: a cancelled job, a lost node) are ended at the
// drain and carry slurm.end_known=false with a status saying so. The
// drain and the epilog end after the collector has stopped: the
// supervisor appends them to traces.jsonl itself (afterdrain.go).
//
// Bounds: at most MaxStepSpans step spans per node; later steps are
// counted into one slurm.steps.aggregated span (count, failures, worst
// exit code, summed duration), and at most MaxOpenSteps steps are tracked
// open at once (more are counted as unseen).
const (
	// MaxStepSpans bounds the step spans of one node.
	MaxStepSpans = 100
	// MaxOpenSteps bounds the steps tracked between start and end.
	MaxOpenSteps = 1024
	// PhaseFlush is how often ended spans are exported.
	PhaseFlush = time.Second
	// PhaseExportTimeout bounds one export to the collector.
	PhaseExportTimeout = 2 * time.Second
	// phaseScope names the instrumentation scope of the phase spans.
	phaseScope = contract.PhaseScope
)

// Slurm's special step ids (slurm.h).
const (
	stepBatch       = 0xfffffffb
	stepExtern      = 0xfffffffc
	stepInteractive = 0xfffffffa
	stepPending     = 0xfffffffd
)

// StepName names a Slurm step id as Slurm's tools do ("batch", "extern",
// "interactive" or the number).
func StepName(id uint32) string {
	switch id {
	case stepBatch:
		return "batch"
	case stepExtern:
		return "extern"
	case stepInteractive:
		return "interactive"
	case stepPending:
		return "pending"
	}
	return strconv.FormatUint(uint64(id), 10)
}

type openStep struct {
	start time.Time
	// kept: the step has a span of its own (a slot of MaxStepSpans taken
	// at its start); false: it is folded into slurm.steps.aggregated.
	// Decided at the start, where the step's TRACEPARENT names the span.
	kept bool
}

// aggregate is the steps past MaxStepSpans, folded.
type aggregate struct {
	count, failed int
	worstExit     int
	first, last   time.Time
	total         time.Duration
}

// PrologSupervisorStart is the slurm.prolog span's attribute with the
// supervisor's own start (Int, unix ns): the prolog's part before it
// (the plugin's checks, the launch as the user), the collector's start
// after it. With the prolog's start handed on it is later than the span's
// start; without, equal.
const PrologSupervisorStart = vocab.AttrPrologSupervisorStart

// phases records the node's phases and exports them as spans.
type phases struct {
	facts   jobfacts.Facts
	trace   []byte
	root    []byte
	start   time.Time // the prolog's start (or the supervisor's, marked)
	guessed bool      // start is the supervisor's own start: the prolog's was not handed on
	// supervisorStart is the supervisor's own start (the prolog span's
	// slurm.prolog.supervisor_start_unix_nano: the prolog's part before
	// it, the collector's start after it).
	supervisorStart time.Time

	mu       sync.Mutex
	open     map[uint32]openStep
	pending  []*tracev1.Span
	spans    int // step spans made
	agg      aggregate
	unseen   int // steps not tracked: MaxOpenSteps open at once
	ended    bool
	submit   time.Time // the job's submit (the first node only; zero: not known)
	queueErr string    // why the submit is not known
	exported int       // spans the collector accepted
	sentAt   time.Time // when the collector last accepted spans
	busy     bool      // an export is under way: exported is about to change
	failures int       // exports that failed
	lastErr  string
	// queueAsked starts the queue-wait query once (askQueue); queueDone
	// is closed at its answer.
	queueAsked sync.Once
	queueDone  chan struct{}
	// epilogStart is the epilog's start as it told it (zero: not told).
	epilogStart time.Time
	// jobExit is the job's exit status and derived exit code as the
	// epilog told them (from slurmd's SLURM_JOB_EXIT_CODE and
	// SLURM_JOB_DERIVED_EC; nil: not told).
	jobExit *launch.JobExit
}

// newPhases starts the node's record; start is the prolog's start (zero:
// unknown, the supervisor's start is used and marked).
func newPhases(f jobfacts.Facts, prologStart, supervisorStart time.Time) *phases {
	p := &phases{facts: f, open: map[uint32]openStep{}, start: prologStart, supervisorStart: supervisorStart, queueDone: make(chan struct{})}
	if p.start.IsZero() {
		p.start, p.guessed = supervisorStart, true
	}
	p.trace = JobTraceID(f)
	h := sha256.Sum256(append(append([]byte{}, p.trace...), []byte("/node/"+f.Node)...))
	p.root = h[:8]
	return p
}

// JobTraceID is the trace id of one run of a job: the first 16 bytes of
// SHA-256 over its cluster, job id, restart count and SLUID, the same on
// every node of the run.
func JobTraceID(f jobfacts.Facts) []byte {
	h := sha256.Sum256([]byte("gym-otel-spank/job/" + f.Cluster + "/" + f.JobID + "/" + f.RestartCount + "/" + f.SLUID))
	return h[:16]
}

func (p *phases) spanID(kind string) []byte {
	h := sha256.Sum256(append(append([]byte{}, p.root...), []byte(kind)...))
	return h[:8]
}

func strAttr(k, v string) *commonv1.KeyValue {
	return &commonv1.KeyValue{Key: k, Value: &commonv1.AnyValue{Value: &commonv1.AnyValue_StringValue{StringValue: v}}}
}

func intAttr(k string, v int64) *commonv1.KeyValue {
	return &commonv1.KeyValue{Key: k, Value: &commonv1.AnyValue{Value: &commonv1.AnyValue_IntValue{IntValue: v}}}
}

func boolAttr(k string, v bool) *commonv1.KeyValue {
	return &commonv1.KeyValue{Key: k, Value: &commonv1.AnyValue{Value: &commonv1.AnyValue_BoolValue{BoolValue: v}}}
}

func (p *phases) span(name string, id, parent []byte, start, end time.Time, attrs ...*commonv1.KeyValue) *tracev1.Span {
	if end.Before(start) {
		end = start
	}
	return &tracev1.Span{
		TraceId: p.trace, SpanId: id, ParentSpanId: parent, Name: name, Kind: tracev1.Span_SPAN_KIND_INTERNAL,
		StartTimeUnixNano: uint64(start.UnixNano()), EndTimeUnixNano: uint64(end.UnixNano()),
		Attributes: append([]*commonv1.KeyValue{strAttr(vocab.AttrNode, p.facts.Node)}, attrs...),
	}
}

func errStatus(msg string) *tracev1.Status {
	return &tracev1.Status{Code: tracev1.Status_STATUS_CODE_ERROR, Message: msg}
}

// ready records the prolog span: its start to the collector's ready, with
// the supervisor's own start (slurm.prolog.supervisor_start_unix_nano).
func (p *phases) ready(at time.Time) {
	attrs := []*commonv1.KeyValue{boolAttr(vocab.AttrStartKnown, !p.guessed)}
	if !p.supervisorStart.IsZero() {
		attrs = append(attrs, intAttr(PrologSupervisorStart, p.supervisorStart.UnixNano()))
	}
	s := p.span(vocab.SpanProlog, p.spanID("prolog"), p.root, p.start, at, attrs...)
	if p.guessed {
		s.Status = &tracev1.Status{Message: "the prolog's start was not handed on: the span starts at the supervisor's start"}
	}
	p.mu.Lock()
	p.pending = append(p.pending, s)
	p.mu.Unlock()
}

// handle serves one of the steps' and the epilog's lines of the hold
// socket (controlVerbs): the answer, or "" when line is none of them.
func (p *phases) handle(line string) string {
	v, args := controlVerbOf(line)
	if v == nil || v.phase == nil {
		return ""
	}
	return v.phase(p, args)
}

// okLine is the answer that takes a line (contract.ControlOK).
const okLine = contract.ControlOK + "\n"

// stepStartLine serves "step start <step id> <unix ms>": "ok", or "ok
// <traceparent>" when the step has a span to run its tasks in.
func (p *phases) stepStartLine(args []string) string {
	if len(args) != 2 {
		return "bad line\n"
	}
	id, ok := stepID(args[0])
	if !ok {
		return "bad step id\n"
	}
	t, err := strconv.ParseInt(args[1], 10, 64)
	if err != nil || t <= 0 {
		return "bad time\n"
	}
	if tp := p.stepStart(id, time.UnixMilli(t)); tp != "" {
		return contract.ControlOK + " " + tp + "\n"
	}
	return okLine
}

// stepEndLine serves "step end <step id> <start ms> <end ms> <tasks end
// ms|0> <final wait end ms|0> <exit code|-1> <signal|0> <tasks>": "ok".
func (p *phases) stepEndLine(args []string) string {
	if len(args) != 8 {
		return "bad line\n"
	}
	id, ok := stepID(args[0])
	if !ok {
		return "bad step id\n"
	}
	var v [7]int64
	for i := range v {
		n, err := strconv.ParseInt(args[1+i], 10, 64)
		if err != nil {
			return "bad field\n"
		}
		v[i] = n
	}
	ms := func(v int64) time.Time {
		if v <= 0 {
			return time.Time{}
		}
		return time.UnixMilli(v)
	}
	p.stepEnd(stepEnd{id: id, start: ms(v[0]), end: ms(v[1]), tasksEnd: ms(v[2]), finalEnd: ms(v[3]),
		exit: int(v[4]), signal: int(v[5]), tasks: int(v[6])})
	return okLine
}

// stepID parses a step id (Slurm's uint32, the special ids among them).
func stepID(s string) (uint32, bool) {
	v, err := strconv.ParseUint(s, 10, 32)
	return uint32(v), err == nil
}

// stepStart opens the step and returns the trace context its tasks get as
// TRACEPARENT (W3C trace-context, "00-<trace id>-<span id>-01"): the
// step's slurm.step span, the slurm.batch_script span for the batch step
// (the span that wraps the script's process), the slurm.steps.aggregated
// span for a step past MaxStepSpans; "" when the step makes no span
// (tracked steps at MaxOpenSteps, or the node's spans ended).
//
// The C side gets the context in the answer to its "step start" line
// rather than deriving it: the span ids are SHA-256 over the run's
// identity (cluster, job id, restart count, SLUID), the node and the
// step's start, and only this side has all of them; one derivation, here,
// cannot drift from a second one in C, and a step whose answer does not
// come within the exchange's bound just gets no TRACEPARENT.
func (p *phases) stepStart(id uint32, at time.Time) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return ""
	}
	if o, ok := p.open[id]; ok && o.start.Equal(at) {
		return p.stepContext(id, o) // the same line again: the same answer
	}
	if len(p.open) >= MaxOpenSteps {
		p.unseen++
		return ""
	}
	o := openStep{start: at, kept: true}
	if id != stepBatch && id != stepExtern {
		if p.spans >= MaxStepSpans {
			o.kept = false
		} else {
			p.spans++
		}
	}
	p.open[id] = o
	return p.stepContext(id, o)
}

// stepContext is the W3C traceparent of the span a step's tasks run in.
func (p *phases) stepContext(id uint32, o openStep) string {
	var sid []byte
	switch {
	case !o.kept:
		sid = p.spanID("aggregated")
	case id == stepBatch:
		sid = p.spanID("batch_script/" + strconv.FormatInt(o.start.UnixMilli(), 10))
	default:
		sid = p.stepSpanID(id, o.start)
	}
	return fmt.Sprintf("00-%x-%x-01", p.trace, sid)
}

// stepSpanID is the span id of the step's slurm.step span on this node.
func (p *phases) stepSpanID(id uint32, start time.Time) []byte {
	return p.spanID("step/" + StepName(id) + "/" + strconv.FormatInt(start.UnixMilli(), 10))
}

// stepEnd is one step's end as slurmstepd saw it.
type stepEnd struct {
	id                  uint32
	start, end          time.Time
	tasksEnd, finalEnd  time.Time // zero: not the batch step, or not known
	exit, signal, tasks int       // exit -1: no task's status known
	known               bool      // false: ended at the drain, its end not seen
	// opened: the step's start was seen, and kept says whether it took
	// a span of its own then (stepStart).
	opened, kept bool
}

func (p *phases) stepEnd(e stepEnd) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if o, ok := p.open[e.id]; ok {
		if e.start.IsZero() {
			e.start = o.start
		}
		e.opened, e.kept = true, o.kept
		delete(p.open, e.id)
	}
	if e.end.IsZero() {
		e.end = time.Now()
	} else {
		e.known = true
	}
	if e.start.IsZero() {
		e.start = e.end
	}
	p.addStep(e)
}

// addStep makes the step's spans, or folds the step into the aggregate
// past MaxStepSpans (the batch and extern steps are always kept).
func (p *phases) addStep(e stepEnd) {
	failed := e.signal != 0 || e.exit > 0 || !e.known
	special := e.id == stepBatch || e.id == stepExtern
	if !e.opened {
		// No start seen: decided now.
		e.kept = special || p.spans < MaxStepSpans
		if e.kept && !special {
			p.spans++
		}
	}
	if !e.kept {
		a := &p.agg
		a.count++
		if failed {
			a.failed++
		}
		a.worstExit = max(a.worstExit, e.exit)
		if a.first.IsZero() || e.start.Before(a.first) {
			a.first = e.start
		}
		if e.end.After(a.last) {
			a.last = e.end
		}
		a.total += e.end.Sub(e.start)
		return
	}
	name := StepName(e.id)
	sid := p.stepSpanID(e.id, e.start)
	attrs := []*commonv1.KeyValue{strAttr(vocab.AttrStepID, name), boolAttr(vocab.AttrEndKnown, e.known)}
	if e.tasks > 0 {
		attrs = append(attrs, intAttr(vocab.AttrStepTasks, int64(e.tasks)))
	}
	switch {
	case e.signal != 0:
		attrs = append(attrs, intAttr(vocab.AttrStepSignal, int64(e.signal)))
	case e.exit >= 0:
		attrs = append(attrs, intAttr(vocab.AttrStepExitCode, int64(e.exit)))
	}
	s := p.span(vocab.SpanStep, sid, p.root, e.start, e.end, attrs...)
	switch {
	case !e.known:
		s.Status = errStatus("the step's end was not seen on this node (the job was cancelled, timed out or lost the node): ended at the drain")
	case e.signal != 0:
		s.Status = errStatus(fmt.Sprintf("a task was killed by signal %d", e.signal))
	case e.exit > 0:
		s.Status = errStatus(fmt.Sprintf("exit code %d", e.exit))
	}
	p.pending = append(p.pending, s)
	if e.id != stepBatch {
		return
	}
	scriptEnd, scriptKnown := e.tasksEnd, !e.tasksEnd.IsZero()
	if !scriptKnown {
		scriptEnd = e.end
	}
	bs := p.span(vocab.SpanBatchScript, p.spanID("batch_script/"+strconv.FormatInt(e.start.UnixMilli(), 10)), sid, e.start, scriptEnd,
		boolAttr(vocab.AttrEndKnown, scriptKnown))
	bs.Status = s.Status
	if !scriptKnown {
		bs.Status = errStatus("the script's end was not seen: ended with its step")
	}
	p.pending = append(p.pending, bs)
	if scriptKnown && !e.finalEnd.IsZero() {
		p.pending = append(p.pending, p.span(vocab.SpanFinalWait, p.spanID("final_wait/"+strconv.FormatInt(e.start.UnixMilli(), 10)), sid,
			scriptEnd, e.finalEnd))
	}
}

// end ends what is still open at the drain: the open steps (marked), the
// aggregate, and the node's root span.
func (p *phases) end(at time.Time) {
	p.mu.Lock()
	if p.ended {
		p.mu.Unlock()
		return
	}
	open := p.open
	p.open = map[uint32]openStep{}
	p.mu.Unlock()
	for id, o := range open {
		p.mu.Lock()
		p.addStep(stepEnd{id: id, start: o.start, end: at, exit: -1, opened: true, kept: o.kept})
		p.mu.Unlock()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = true
	if a := p.agg; a.count > 0 {
		p.pending = append(p.pending, p.span(vocab.SpanStepsAggregated, p.spanID("aggregated"), p.root, a.first, a.last,
			intAttr(vocab.AttrStepsCount, int64(a.count)), intAttr(vocab.AttrStepsFailed, int64(a.failed)),
			intAttr(vocab.AttrStepsWorstExitCode, int64(a.worstExit)), intAttr(vocab.AttrStepsTotalMs, a.total.Milliseconds()),
			intAttr(vocab.AttrStepsKept, int64(MaxStepSpans))))
	}
	attrs := []*commonv1.KeyValue{strAttr(vocab.AttrJobID, p.facts.JobID), boolAttr(vocab.AttrStartKnown, !p.guessed)}
	start := p.start
	if !p.submit.IsZero() && p.submit.Before(start) {
		start = p.submit // the first node's span holds the queue wait
	}
	if p.queueErr != "" {
		attrs = append(attrs, strAttr(vocab.AttrQueueUnknown, p.queueErr))
	}
	if p.unseen > 0 {
		attrs = append(attrs, intAttr(vocab.AttrStepsUntracked, int64(p.unseen)))
	}
	p.pending = append(p.pending, p.span(vocab.SpanJob, p.root, nil, start, at, attrs...))
}

// take returns the spans not exported yet.
func (p *phases) take() []*tracev1.Span {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.pending
	p.pending = nil
	return s
}

// request wraps spans in one export request with the node's resource
// (TracesData: wire-identical to ExportTraceServiceRequest).
func (p *phases) request(spans []*tracev1.Span) *tracev1.TracesData {
	return &tracev1.TracesData{ResourceSpans: []*tracev1.ResourceSpans{{
		Resource: &resourcev1.Resource{Attributes: []*commonv1.KeyValue{
			strAttr("service.name", "slurm"), strAttr("host.name", p.facts.Node),
			strAttr(contract.EmitterKey, contract.EmitterPhases)}},
		ScopeSpans: []*tracev1.ScopeSpans{{Scope: &commonv1.InstrumentationScope{Name: phaseScope}, Spans: spans}},
	}}}
}

// export sends the pending spans to the collector's OTLP/HTTP receiver of
// the plugin's own telling (port: render.Ports.Plugin, with the plugin's
// token, which the job's tasks are not given); it returns how many were
// accepted. A
// failed export keeps the spans for the next try.
func (p *phases) export(ctx context.Context, port int, token string) (int, error) {
	p.mu.Lock()
	spans := p.pending
	p.pending = nil
	p.busy = len(spans) > 0
	p.mu.Unlock()
	if len(spans) == 0 {
		return 0, nil
	}
	err := postPlugin(ctx, port, token, "/v1/traces", p.request(spans), PhaseExportTimeout)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.busy = false
	if err != nil {
		p.failures++
		p.lastErr = err.Error()
		if len(p.pending)+len(spans) <= 4*MaxStepSpans {
			p.pending = append(spans, p.pending...)
		}
		return 0, err
	}
	p.exported += len(spans)
	p.sentAt = time.Now()
	return len(spans), nil
}

// postPlugin posts req, an OTLP export request, as protobuf to path
// ("/v1/traces" or "/v1/metrics") of the collector's receiver of the
// plugin's own telling at port, with the plugin's token, within timeout.
// Errors: the request's, or an answer other than 200.
func postPlugin(ctx context.Context, port int, token, path string, req proto.Message, timeout time.Duration) error {
	b, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d%s", port, path), bytes.NewReader(b))
	if err != nil {
		return err
	}
	r.Header.Set("Content-Type", "application/x-protobuf")
	r.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the collector's receiver answered HTTP %d", resp.StatusCode)
	}
	return nil
}

// startPhases begins the node's phase spans once the collector is ready,
// when the plugin's prolog started the supervisor (Options.RecordPath
// set): the prolog span now, the steps as they come, exported every
// PhaseFlush until the returned stop.
func (s *supervisor) startPhases(ctx context.Context) (stop func()) {
	if s.opt.RecordPath == "" {
		// Not started by the plugin's prolog: no Slurm phases to tell.
		return func() {}
	}
	s.phases = newPhases(s.opt.Facts, launch.ParsePrologStart(os.Getenv(launch.EnvPrologStart)), s.started)
	s.phases.ready(time.Now())
	if s.control != nil {
		s.control.phases.Store(s.phases)
	}
	if s.opt.Facts.NodeIndex == 0 {
		// The job's first node: one query, once Slurm has launched the
		// job's first step (QueueWaitDelay), or at the drain.
		p := s.phases
		s.queueAsk = time.AfterFunc(QueueWaitDelay, func() { p.askQueue(ctx, squeueSubmit) })
	}
	return tickEvery(PhaseFlush, false, func() {
		if _, err := s.phases.export(ctx, s.ports.Plugin, s.ptoken); err != nil {
			s.log.Debugf("phase spans: %v", err)
		}
	})
}

// tickEvery runs f every d in a goroutine of its own (and once at once
// when now) until the returned stop, which waits for a run under way.
func tickEvery(d time.Duration, now bool, f func()) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		if now {
			f()
		}
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f()
			}
		}
	}()
	return func() { close(done); <-finished }
}

// endPhases ends the node's phase spans at the drain and exports them
// before the collector stops.
func (s *supervisor) endPhases() {
	if s.phases == nil {
		return
	}
	if s.phasesStop != nil {
		s.phasesStop()
		s.phasesStop = nil
	}
	if s.queueAsk != nil {
		// The job's first node: the queue wait's answer in the job's
		// span, asked now if the job ends before QueueWaitDelay.
		s.queueAsk.Stop()
		s.phases.awaitQueue(s.phases.askQueue(context.Background(), squeueSubmit), QueueWaitDrainBound)
	}
	s.phases.end(time.Now())
	if _, err := s.phases.export(context.Background(), s.ports.Plugin, s.ptoken); err != nil {
		s.log.Warnf("the job's phase spans on this node could not be sent to the collector: %v", err)
	}
	s.log.Infof("phase spans: %d sent to the collector (%d failed exports)", s.phases.exported, s.phases.failures)
}

// phaseSpansSent is how many phase spans the collector accepted, and
// whether an export is under way (the collector's counter may already
// hold spans the count does not: pollSelf then reads again at its next
// tick). pollSelf leaves them out of the job's spans (spansAt); the drain
// waits for their span metrics by phasesSentAt. Spans exported to earlier
// collector runs (phaseBase, taken while no collector ran) are left out.
func (s *supervisor) phaseSpansSent() (int64, bool) {
	if s.phases == nil {
		return 0, false
	}
	s.phases.mu.Lock()
	defer s.phases.mu.Unlock()
	return int64(s.phases.exported) - s.phaseBase, s.phases.busy
}

// phasesSentAt is when the collector last accepted phase spans (zero:
// never).
func (s *supervisor) phasesSentAt() time.Time {
	if s.phases == nil {
		return time.Time{}
	}
	s.phases.mu.Lock()
	defer s.phases.mu.Unlock()
	return s.phases.sentAt
}

// newRunBase takes the phase spans exported so far as the earlier runs'
// (phaseSpansSent); called between two collector runs, when no export can
// reach a collector.
func (s *supervisor) newRunBase() {
	if s.phases == nil {
		return
	}
	s.phases.mu.Lock()
	defer s.phases.mu.Unlock()
	s.phaseBase = int64(s.phases.exported)
}
