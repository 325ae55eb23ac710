package supervise

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	commonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
	"github.com/gym-otel-spank/gym-otel-spank/helper/delivery"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
)

// The drain and the epilog as spans. Both end after the collector that
// would export them has exited, so the supervisor writes them itself: once
// the collector has exited, it appends one OTLP-JSON line (the file
// exporter's format) to the node's traces.jsonl, as the job's user, with
// the resource the collector would have given them (render.Identity: the
// run's identity and Lens' keys; and contract.SourceKey, as the plugin's
// pipeline stamps it), and records the line's place in the
// receipt (receipt.Appended). Phase spans the collector did not accept at
// the drain (a hung or killed collector) go into the same line (one whose
// export timed out after the collector took it is then in the file twice,
// with the same span id). No span metrics connector counts them, so the
// supervisor appends their span metrics to metrics.jsonl too, with those
// of every span the connector had not exported when it stopped
// (spancount.go; spanmetrics.go when the files are too large to read), a
// second line the receipt lists. The
// collector never sent them to the backend, so the supervisor sends the
// lines itself right after appending them (deliver: delivery.Once, one
// request per line with the job's endpoint and backend token, at most
// timing.DeliveryBound, one attempt) and records in the receipt whether
// the backend took it (receipt.Appended.Delivered, HTTPStatus, Cause);
// `gym-otel-spank replay --appended DIR` sends the lines not delivered.
//
//   - slurm.drain: from the supervisor's stop (the epilog's SIGTERM, the
//     record gone, Slurm saying the job ended) to the collector's exit,
//     which the supervisor waits for (killed at otel.shutdown_timeout_seconds:
//     it still ends, marked slurm.drain.collector_killed). A collector that
//     had exited before the drain gives slurm.end_known=false.
//   - slurm.epilog: the job epilog tells its start (launch.EnvEpilogStart, taken in
//     C before the Go core loads) on the control socket, "epilog start <unix
//     ms>", and the job's exit when slurmd set it in the epilog's
//     environment ("<status> <derived>": launch.JobExit; the span's
//     slurm.job.exit_code, signal, derived_exit_code, derived_signal and
//     exit_from), before it signals the supervisor (launch.TellEpilogStart: root
//     writes nothing of the user's). Its end comes after the supervisor has exited
//     (the epilog then ends the collector's cgroup and removes root's
//     record), so the span ends at the line's writing and carries
//     slurm.end_known=false; an epilog that did not tell (an older plugin,
//     no control socket, the job ended otherwise) gives no epilog span.
//
// Both are children of the node's slurm.job span and end after it (that
// span is sent before the collector stops).

// epilogLine serves "epilog start <unix ms> [<status> <derived>]"
// (contract.ControlEpilogStart): it records the epilog's start, a plausible
// time (after the node's start of the job, not ahead of the clock by more
// than a minute) once, and the job's exit when told (two unsigned wait
// statuses); later lines are refused.
func (p *phases) epilogLine(args []string) string {
	if len(args) != 1 && len(args) != 3 {
		return "bad line\n"
	}
	exit := args[1:]
	ms, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || ms <= 0 {
		return "bad time\n"
	}
	var je *launch.JobExit
	if len(exit) == 2 {
		st, err1 := strconv.ParseUint(exit[0], 10, 32)
		de, err2 := strconv.ParseUint(exit[1], 10, 32)
		if err1 != nil || err2 != nil {
			return "bad exit\n"
		}
		je = &launch.JobExit{Status: uint32(st), Derived: uint32(de)}
	}
	at := time.UnixMilli(ms)
	if at.Before(p.start) || at.After(time.Now().Add(time.Minute)) {
		return "bad time\n"
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.epilogStart.IsZero() {
		return "bad line\n"
	}
	p.epilogStart, p.jobExit = at, je
	return okLine
}

// drainEnd is what the supervisor knows of its drain once the collector
// has exited.
type drainEnd struct {
	start, exit time.Time
	cause       string
	exitKnown   bool // the collector ran at the drain's start: exit is its exit
	killed      bool // killed at otel.shutdown_timeout_seconds
	clean       bool
}

// afterSpans are the spans that end after the collector: slurm.drain, and
// slurm.epilog when the epilog told its start; now is their writing.
func (p *phases) afterSpans(d drainEnd, now time.Time) []*tracev1.Span {
	p.mu.Lock()
	es, je := p.epilogStart, p.jobExit
	p.mu.Unlock()
	if !es.IsZero() && strings.HasPrefix(d.cause, "signal") {
		d.cause = "epilog (" + d.cause + ")"
	}
	attrs := []*commonv1.KeyValue{strAttr(vocab.AttrDrainCause, d.cause), boolAttr(vocab.AttrEndKnown, d.exitKnown),
		boolAttr(vocab.AttrDrainClean, d.clean), boolAttr(vocab.AttrDrainCollectorKilled, d.killed)}
	ds := p.span(vocab.SpanDrain, p.spanID("drain"), p.root, d.start, d.exit, attrs...)
	switch {
	case !d.exitKnown:
		ds.Status = errStatus("the collector had exited before the drain: the drain ends where the supervisor found it gone")
	case d.killed:
		ds.Status = errStatus("the collector did not shut down within otel.shutdown_timeout_seconds and was killed")
	case !d.clean:
		ds.Status = errStatus("the collector's shutdown ended with an error (see collector.log)")
	}
	out := []*tracev1.Span{ds}
	if !es.IsZero() {
		attrs := []*commonv1.KeyValue{boolAttr(vocab.AttrStartKnown, true), boolAttr(vocab.AttrEndKnown, false)}
		if je != nil {
			// The job's exit as slurmd gave it to the epilog: the batch
			// script's exit code or signal, the steps' highest exit code.
			attrs = append(attrs, intAttr(vocab.AttrJobExitCode, launch.WaitCode(je.Status)), intAttr(vocab.AttrJobSignal, launch.WaitSignal(je.Status)),
				intAttr(vocab.AttrJobDerivedExitCode, launch.WaitCode(je.Derived)), intAttr(vocab.AttrJobDerivedSignal, launch.WaitSignal(je.Derived)),
				strAttr(vocab.AttrJobExitFrom, "SLURM_JOB_EXIT_CODE"))
		}
		e := p.span(vocab.SpanEpilog, p.spanID("epilog"), p.root, es, now, attrs...)
		e.Status = &tracev1.Status{Message: "the epilog goes on after the supervisor has exited (it ends the collector's cgroup and removes root's record): the span ends when the supervisor wrote it"}
		out = append(out, e)
	}
	return out
}

// OTLP-JSON, as the collector's file exporter writes it: ids in hex, 64-bit
// integers as strings, enums as numbers, camelCase names.
type (
	jsonValue struct {
		StringValue *string `json:"stringValue,omitempty"`
		IntValue    *string `json:"intValue,omitempty"`
		BoolValue   *bool   `json:"boolValue,omitempty"`
	}
	jsonKV struct {
		Key   string    `json:"key"`
		Value jsonValue `json:"value"`
	}
	jsonStatus struct {
		Message string `json:"message,omitempty"`
		Code    int32  `json:"code,omitempty"`
	}
	jsonSpan struct {
		TraceID      string      `json:"traceId"`
		SpanID       string      `json:"spanId"`
		ParentSpanID string      `json:"parentSpanId,omitempty"`
		Name         string      `json:"name"`
		Kind         int32       `json:"kind,omitempty"`
		Start        string      `json:"startTimeUnixNano"`
		End          string      `json:"endTimeUnixNano"`
		Attributes   []jsonKV    `json:"attributes,omitempty"`
		Status       *jsonStatus `json:"status,omitempty"`
	}
	jsonResourceSpans struct {
		Resource struct {
			Attributes []jsonKV `json:"attributes"`
		} `json:"resource"`
		ScopeSpans []struct {
			Scope struct {
				Name string `json:"name"`
			} `json:"scope"`
			Spans []jsonSpan `json:"spans"`
		} `json:"scopeSpans"`
	}
	jsonTraces struct {
		ResourceSpans []jsonResourceSpans `json:"resourceSpans"`
	}
)

func jsonAttrs(kvs []*commonv1.KeyValue) []jsonKV {
	out := make([]jsonKV, 0, len(kvs))
	for _, kv := range kvs {
		var v jsonValue
		switch x := kv.GetValue().GetValue().(type) {
		case *commonv1.AnyValue_StringValue:
			v.StringValue = &x.StringValue
		case *commonv1.AnyValue_IntValue:
			s := strconv.FormatInt(x.IntValue, 10)
			v.IntValue = &s
		case *commonv1.AnyValue_BoolValue:
			v.BoolValue = &x.BoolValue
		default:
			continue
		}
		out = append(out, jsonKV{Key: kv.Key, Value: v})
	}
	return out
}

// TracesLine is spans as one OTLP-JSON line (newline included) of one
// resource (its attributes: identity, strings or Ints) and scope; the
// spans' attributes may be strings, Ints or bools.
func TracesLine(identity []render.Attr, scope string, spans []*tracev1.Span) ([]byte, error) {
	res, err := resourceAttrs(identity)
	if err != nil {
		return nil, err
	}
	var t jsonTraces
	t.ResourceSpans = make([]jsonResourceSpans, 1)
	rs := &t.ResourceSpans[0]
	rs.Resource.Attributes = jsonAttrs(res)
	rs.ScopeSpans = make([]struct {
		Scope struct {
			Name string `json:"name"`
		} `json:"scope"`
		Spans []jsonSpan `json:"spans"`
	}, 1)
	rs.ScopeSpans[0].Scope.Name = scope
	for _, s := range spans {
		js := jsonSpan{
			TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId), ParentSpanID: hex.EncodeToString(s.ParentSpanId),
			Name: s.Name, Kind: int32(s.Kind),
			Start: strconv.FormatUint(s.StartTimeUnixNano, 10), End: strconv.FormatUint(s.EndTimeUnixNano, 10),
			Attributes: jsonAttrs(s.Attributes),
		}
		if st := s.Status; st != nil && (st.Message != "" || st.Code != 0) {
			js.Status = &jsonStatus{Message: st.Message, Code: int32(st.Code)}
		}
		rs.ScopeSpans[0].Spans = append(rs.ScopeSpans[0].Spans, js)
	}
	b, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// resourceAttrs is identity as attributes (an Int's value parsed).
func resourceAttrs(identity []render.Attr) ([]*commonv1.KeyValue, error) {
	var res []*commonv1.KeyValue
	for _, a := range identity {
		if a.Int {
			n, err := strconv.ParseInt(a.Value, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("resource attribute %s: %q is not an Int", a.Key, a.Value)
			}
			res = append(res, intAttr(a.Key, n))
		} else {
			res = append(res, strAttr(a.Key, a.Value))
		}
	}
	return res, nil
}

// AppendLine appends line (one line, its newline included) to the file at
// path as the calling process's user: never through a symbolic link
// (O_NOFOLLOW), never into anything but a regular file of this user (a
// FIFO is not waited on: O_NONBLOCK), created (0600) when missing. A file
// whose last byte is not a newline (a partial line) gets one first, so the
// line stays whole. It returns the line's offset and length in the file.
func AppendLine(path string, line []byte) (offset, length int64, err error) {
	if len(line) == 0 || line[len(line)-1] != '\n' || bytes.Count(line, []byte{'\n'}) != 1 {
		return 0, 0, errors.New("not one line")
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || !ok || st.Uid != uint32(os.Geteuid()) {
		return 0, 0, fmt.Errorf("%s: not a regular file of uid %d: nothing appended", path, os.Geteuid())
	}
	size := fi.Size()
	if size > 0 {
		last := make([]byte, 1)
		r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if err != nil {
			return 0, 0, err
		}
		_, err = r.ReadAt(last, size-1)
		r.Close()
		if err != nil {
			return 0, 0, err
		}
		if last[0] != '\n' {
			line = append([]byte{'\n'}, line...)
		}
	}
	if _, err := f.Write(line); err != nil {
		return 0, 0, err
	}
	if line[0] == '\n' {
		return size + 1, int64(len(line)) - 1, nil
	}
	return size, int64(len(line)), nil
}

// appendAfterCollector writes the drain's (and the epilog's) spans to
// traces.jsonl once the collector has exited, then the span metrics no
// connector exported (countAll: the continuation of every series the
// files' spans outnumber, spancount.go; else only those of the appended
// spans), notes the lines for the receipt (written at once), and delivers
// them to the backend within bound (deliver). It never fails the drain: a
// refusal is logged (the supervisor's and the collector's log), and the
// receipt lists no line.
func (s *supervisor) appendAfterCollector(d drainEnd, bound time.Duration, countAll bool) {
	if s.base() == "" {
		return // the output dir is not held: nothing is written there
	}
	deadline := time.Now().Add(bound)
	now := time.Now()
	metricsID := render.Identity(render.Input{Resolved: s.opt.Resolved, Job: render.JobOf(s.opt.Resolved, s.opt.Facts)}, "slurm")
	// The phase spans' resource carries the emitter's mark (phases.go),
	// and the connector keeps it on their span metrics.
	metricsID = append(metricsID, render.Attr{Key: contract.EmitterKey, Value: contract.EmitterPhases})
	var lines []appendedLine
	var spans []*tracev1.Span
	if s.phases != nil {
		// The phase spans the collector did not accept at the drain (an
		// export that failed: a hung or killed collector, the node's root
		// span among them) go into the same line.
		left := s.phases.take()
		spans = append(left, s.phases.afterSpans(d, now)...)
		// The mark the plugin's pipeline (resource/source) gives the phase
		// spans it receives: these are the plugin's own too. (The metrics
		// pipeline takes it off the connector's points, so their span
		// metrics go without it.)
		id := append(append([]render.Attr{}, metricsID...), render.Attr{Key: contract.SourceKey, Value: contract.SourceSlurm})
		line, err := TracesLine(id, phaseScope, spans)
		if err == nil {
			var al appendedLine
			if al, err = s.appendNoted("traces", line, len(spans), 0); err == nil {
				if len(left) > 0 {
					s.log.Infof("%d phase spans the collector did not accept are appended with the drain's", len(left))
				}
				s.log.Infof("the drain's phase spans (%d) appended to %s after the collector's exit (%s)", len(spans), filepath.Join(s.out, jobdir.SignalFile("traces")), al.where(s))
				lines = append(lines, al)
			}
		}
		if err != nil {
			spans = nil
			appendLog(s.logPath, fmt.Sprintf("gym-otel: the drain's phase spans could not be written to traces.jsonl: %v", err))
			s.log.Warnf("the drain's phase spans could not be written to traces.jsonl: %v", err)
		}
	}
	var ml appendedLine
	ok := false
	switch {
	case countAll:
		ml, ok = s.appendSpanContinuation(now)
	case len(spans) > 0:
		ml, ok = s.appendSpanMetrics(metricsID, spans, now)
	}
	if ok {
		lines = append(lines, ml)
	}
	// The energy of the job's GPUs per step (energymetrics.go), under the
	// run's identity.
	if el, ok := s.appendEnergyMetrics(render.Identity(render.Input{Resolved: s.opt.Resolved, Job: render.JobOf(s.opt.Resolved, s.opt.Facts)}, "slurm")); ok {
		lines = append(lines, el)
	}
	if len(lines) == 0 {
		return
	}
	// The receipt first: a supervisor ended during the delivery still
	// leaves the lines listed, as not delivered.
	s.saveReceipt(false)
	s.deliver(lines, min(bound, time.Until(deadline)))
}

// appendSpanContinuation appends to metrics.jsonl the span metrics the
// connector did not export of the spans in traces.jsonl (spanContinuation,
// its time now) and notes the line for the receipt; false when every
// series was counted. A failure is logged and appends nothing.
func (s *supervisor) appendSpanContinuation(now time.Time) (appendedLine, bool) {
	start := time.Now()
	line, series, err := spanContinuation(s.path(jobdir.SignalFile("traces")), s.path(jobdir.SignalFile("metrics")), now)
	read := time.Since(start)
	if err == nil && line == nil {
		s.log.Infof("every span of traces.jsonl is counted in the span metrics of metrics.jsonl (read in %d ms)", read.Milliseconds())
		return appendedLine{}, false
	}
	if err == nil {
		var al appendedLine
		if al, err = s.appendNoted("metrics", line, 0, 2*series); err == nil { // calls and duration per series
			s.log.Infof("the span metrics the connector did not export (%d series the spans in traces.jsonl outnumber, read in %d ms) appended to %s (%s)",
				series, read.Milliseconds(), filepath.Join(s.out, jobdir.SignalFile("metrics")), al.where(s))
			return al, true
		}
	}
	appendLog(s.logPath, fmt.Sprintf("gym-otel: the span metrics of the last spans could not be written to metrics.jsonl: %v", err))
	s.log.Warnf("the span metrics of the last spans could not be written to metrics.jsonl: %v", err)
	return appendedLine{}, false
}

// appendedLine is one line appended after the collector's exit: its
// entry in s.appended, its signal and its bytes.
type appendedLine struct {
	index  int
	signal string
	line   []byte
}

// where is the line's place in its file, for the log.
func (al appendedLine) where(s *supervisor) string {
	a := s.appended[al.index]
	return fmt.Sprintf("offset %d, %d bytes", a.Offset, a.Length)
}

// appendNoted appends line to the output dir's file of signal (AppendLine)
// and notes it for the receipt with the spans or points it holds, as not
// delivered yet (deliver says otherwise once the backend took it).
// Errors: AppendLine's; nothing is noted then.
func (s *supervisor) appendNoted(signal string, line []byte, spans, points int) (appendedLine, error) {
	file := jobdir.SignalFile(signal)
	off, n, err := AppendLine(s.path(file), line)
	if err != nil {
		return appendedLine{}, err
	}
	s.appended = append(s.appended, receipt.Appended{File: file, Offset: off, Length: n, Spans: spans, Points: points,
		Cause: "not delivered yet (the supervisor ended before its delivery)"})
	return appendedLine{index: len(s.appended) - 1, signal: signal, line: line}, nil
}

// appendSpanMetrics appends the span metrics of spans (appended to
// traces.jsonl, never seen by the connector) to metrics.jsonl
// (SpanMetricsLine; identity is their resource) and notes the line for the
// receipt. A failure is logged and appends nothing.
func (s *supervisor) appendSpanMetrics(identity []render.Attr, spans []*tracev1.Span, now time.Time) (appendedLine, bool) {
	line, err := SpanMetricsLine(identity, spans, now)
	if err == nil {
		points := 2 * spanSeriesCount(spans) // calls and duration per series
		var al appendedLine
		if al, err = s.appendNoted("metrics", line, 0, points); err == nil {
			s.log.Infof("the span metrics of the appended spans (%d points) appended to %s (%s)",
				points, filepath.Join(s.out, jobdir.SignalFile("metrics")), al.where(s))
			return al, true
		}
	}
	appendLog(s.logPath, fmt.Sprintf("gym-otel: the span metrics of the drain's phase spans could not be written to metrics.jsonl: %v", err))
	s.log.Warnf("the span metrics of the drain's phase spans could not be written to metrics.jsonl: %v", err)
	return appendedLine{}, false
}

// spanSeriesCount is the number of the connector's series spans fall in
// (span name, kind, status code).
func spanSeriesCount(spans []*tracev1.Span) int {
	seen := map[[3]string]bool{}
	for _, sp := range spans {
		seen[[3]string{sp.Name, sp.Kind.String(), sp.GetStatus().GetCode().String()}] = true
	}
	return len(seen)
}

// deliver sends lines, just appended (s.appended), to the job's backend
// once, within bound: each line in one request (delivery.Once, the
// request the files' sender makes: OTLP/HTTP JSON, gzip, the job's
// endpoint and backend bearer token, never the receiver token; the token
// as a resource attribute with otel.token_resource_attribute), no
// retries, no second collector. The settings are the job's options, the
// same the job's collector.yaml was rendered from (that file is the
// user's and is not read back). It records the outcome in each line's
// receipt.Appended: Delivered when the backend accepted every item, else
// the cause and the HTTP status when the backend answered with one.
// Nothing is sent without a backend, under delivery from the files (the
// files' last pass sends them), with remote export off, or with less than
// a tenth of a second left.
func (s *supervisor) deliver(lines []appendedLine, bound time.Duration) {
	start := time.Now()
	cause := ""
	switch {
	case s.files != nil:
		return // delivered from the files with the rest (filedelivery.go)
	case !s.o.RemoteExport():
		return // remote export off: the files only (receipt.RemoteExportOff)
	case s.o.Endpoint == "":
		cause = "no backend configured (otel.endpoint): nothing sent"
	case bound < 100*time.Millisecond:
		cause = fmt.Sprintf("no time left within the epilog's wait for the drain (%v): not sent", bound.Round(time.Millisecond))
	}
	if cause != "" {
		for _, l := range lines {
			a := &s.appended[l.index]
			a.Delivered, a.HTTPStatus, a.Cause = false, 0, cause
		}
		s.log.Infof("the appended phase spans: %s", cause)
		return
	}
	failed := ""
	for i, c := range s.send(lines, bound) {
		a := &s.appended[lines[i].index]
		a.Delivered, a.HTTPStatus, a.Cause = c.cause == "", c.status, c.cause
		if c.cause != "" && failed == "" {
			failed = c.cause
		}
	}
	if failed == "" {
		s.log.Infof("the appended lines (%d) delivered to the backend %s in %d ms (one request each, no second collector)", len(lines), s.o.Endpoint, time.Since(start).Milliseconds())
		return
	}
	s.log.Warnf("the appended phase spans were not delivered to the backend: attempt of %d ms (bound %v): %s; `gym-otel-spank replay --appended` sends them",
		time.Since(start).Milliseconds(), bound, failed)
	appendLog(s.logPath, "gym-otel: the appended phase spans were not delivered to the backend: "+failed)
}

// lineOutcome is one appended line's delivery: cause is "" when the
// backend accepted every item, else why not (one line); status is the
// HTTP status the backend answered with (0: no answer).
type lineOutcome struct {
	cause  string
	status int
}

// send is deliver's one attempt: each line in one request of its own, in
// order, within what is left of bound (a request also within the job's
// export timeout), and each line's outcome, so that a line the backend
// took is never marked for `replay --appended` to send again.
func (s *supervisor) send(lines []appendedLine, bound time.Duration) []lineOutcome {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	timeout := bound
	if t := time.Duration(s.o.ExportTimeoutSeconds) * time.Second; t > 0 {
		timeout = min(timeout, t)
	}
	opt := s.backendRequests(timeout)
	out := make([]lineOutcome, len(lines))
	for i, l := range lines {
		a, err := delivery.Once(ctx, opt, l.signal, l.line)
		var ne net.Error
		var op *net.OpError
		switch {
		case err != nil && ctx.Err() != nil:
			// The bound is what the drain's wait has left (2 s less a
			// few ms): said to a tenth of a second.
			out[i].cause = fmt.Sprintf("no answer from the backend within %v", bound.Round(100*time.Millisecond))
		case err != nil && errors.As(err, &ne) && ne.Timeout():
			out[i].cause = fmt.Sprintf("no answer from the backend within %v (the request's timeout)", timeout.Round(time.Millisecond))
		case err != nil && errors.As(err, &op) && op.Op == "dial":
			out[i].cause = oneLine(fmt.Sprintf("the backend %s cannot be reached: %v", s.o.Endpoint, op.Err))
		case err != nil:
			out[i].cause = oneLine(err.Error())
		case !a.OK():
			out[i].cause, out[i].status = oneLine(a.Cause()), a.Status
		}
	}
	return out
}

// oneLine cuts a cause to 300 bytes.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:297] + "..."
	}
	return s
}
