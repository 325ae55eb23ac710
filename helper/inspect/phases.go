package inspect

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
)

// The job's Slurm phases: the spans of the scope contract.PhaseScope whose
// resource carries the plugin's mark (contract.SourceKey, which the node's
// collector stamps on what the supervisor posts to its own receiver and
// deletes from what the job sends; unmarked ones are the job's, counted
// in JobLookalikes) that the supervisor emits on each node (helper/supervise/phases.go,
// queuewait.go): slurm.job (the node's root), slurm.queue_wait (the first
// node only), slurm.prolog, slurm.step (one per step, the extern step
// too), slurm.batch_script and slurm.final_wait (under the batch step),
// slurm.steps.aggregated (the steps past the supervisor's bound), and
// slurm.epilog and slurm.drain, which the supervisor appends to
// traces.jsonl after the collector's exit (helper/supervise/afterdrain.go).
// What a span marks as not known (slurm.start_known=false,
// slurm.end_known=false) is shown as not known: the span's own time there
// is the supervisor's start or the drain, not the phase's. The epilog's
// end is never known (it goes on after the supervisor has exited): its
// span ends where the supervisor wrote it.

// Span names of the phase spans.
const (
	phaseJob        = vocab.SpanJob
	phaseQueueWait  = vocab.SpanQueueWait
	phaseProlog     = vocab.SpanProlog
	phaseStep       = vocab.SpanStep
	phaseBatch      = vocab.SpanBatchScript
	phaseFinalWait  = vocab.SpanFinalWait
	phaseAggregated = vocab.SpanStepsAggregated
	phaseEpilog     = vocab.SpanEpilog
	phaseDrain      = vocab.SpanDrain
)

// Bounds on the phases kept, whatever the files hold.
const (
	maxPhaseNodes = 1024 // node dirs (and chain links) with phases kept
	maxNodePhases = 256  // phase spans kept per node (the supervisor sends at most about 110)
)

// NodePhases are one node's Slurm phases (one run of the job: a later
// link of a chain is its own entry).
type NodePhases struct {
	Node string `json:"node"`
	// Link is the chain link's job id ("" for the job itself).
	Link string `json:"link,omitempty"`
	// JobID is slurm.job's slurm.job.id; Restart the run's
	// slurm_job_restart_count (a requeued job's runs are entries of their
	// own); TraceID the run's trace (the same on every node of one run).
	JobID   string `json:"job_id,omitempty"`
	Restart string `json:"restart_count,omitempty"`
	TraceID string `json:"trace_id"`
	// Phases are the node's phases: slurm.job first, then by start.
	Phases []Phase `json:"phases"`
	// Dropped counts the phase spans past the bound of 256 per node.
	Dropped int `json:"dropped,omitempty"`
	// QueueWaitUnknown is why the queue wait is not known, as the first
	// node's slurm.job says (its query of the submit time failed).
	QueueWaitUnknown string `json:"queue_wait_unknown,omitempty"`
}

// Phase is one phase span.
type Phase struct {
	// Name is the span's name (slurm.job, slurm.queue_wait, ...), Step the
	// step's id for slurm.step ("batch", "extern", "0", ...).
	Name string `json:"name"`
	Step string `json:"step,omitempty"`
	// Start and End are the phase's start and end, null where the node did
	// not know them: Start where the prolog's start was not handed on,
	// End where the step's end was not seen (a cancelled job, a time
	// limit, a lost node).
	Start *time.Time `json:"start"`
	End   *time.Time `json:"end"`
	// SpanStart and SpanEnd are the span's own times: where Start or End
	// is null, the supervisor's start and the drain, where the node cut
	// the span.
	SpanStart time.Time `json:"span_start"`
	SpanEnd   time.Time `json:"span_end"`
	// DurationSeconds is End - Start, null when either is.
	DurationSeconds Value `json:"duration_seconds"`
	// Precision is the times' precision where it is coarser than the
	// span's ("1s": the queue wait, from slurmctld's whole seconds).
	Precision string `json:"precision,omitempty"`
	// ExitCode and Signal are a step's (ExitCode null when no task's
	// status was known, Signal null when no task was killed).
	ExitCode *int `json:"exit_code,omitempty"`
	Signal   *int `json:"signal,omitempty"`
	Tasks    int  `json:"tasks,omitempty"`
	// JobExit is the job's exit on the epilog's span: what slurmd gave
	// the job epilog (SLURM_JOB_EXIT_CODE, SLURM_JOB_DERIVED_EC); nil on
	// other phases and where the epilog did not have it.
	JobExit *JobExit `json:"job_exit,omitempty"`
	// Error is the span's error status message; Note its message when
	// not an error (the prolog's start not handed on).
	Error string `json:"error,omitempty"`
	Note  string `json:"note,omitempty"`
	// Aggregated is slurm.steps.aggregated's figures: the steps past the
	// supervisor's bound of step spans per node, folded.
	Aggregated *AggregatedSteps `json:"aggregated,omitempty"`
}

// JobExit is the job's exit as slurmd gave it to the job epilog's
// environment, carried on the slurm.epilog span: the batch script's exit
// code and signal (0: none; SLURM_JOB_EXIT_CODE, "code:signal" in
// SLURM_JOB_EXIT_CODE2), the highest of the steps'
// (SLURM_JOB_DERIVED_EC), and the variable it came from.
type JobExit struct {
	ExitCode        int    `json:"exit_code"`
	Signal          int    `json:"signal"`
	DerivedExitCode int    `json:"derived_exit_code"`
	DerivedSignal   int    `json:"derived_signal"`
	From            string `json:"from"`
}

// AggregatedSteps are the steps folded into one span.
type AggregatedSteps struct {
	Count         int     `json:"count"`
	Failed        int     `json:"failed"`
	WorstExitCode int     `json:"worst_exit_code"`
	TotalSeconds  float64 `json:"total_seconds"`
	// Kept is the step spans kept before folding began.
	Kept int `json:"kept"`
}

// FirstRollout answers "where did the time go between the job's submit
// and its first rollout", on the job's batch node (the first run of a
// chain): each part is between two times the files hold, null where one
// of them is not known. Clocks of different nodes are compared as they
// are (the first rollout may be on another node).
type FirstRollout struct {
	// Node is the node of the batch step; RolloutNode the first rollout's.
	Node        string `json:"node,omitempty"`
	RolloutNode string `json:"rollout_node,omitempty"`
	// Submit, Start (slurmctld's, whole seconds), PrologStart,
	// CollectorReady, BatchStart and FirstRollout (the first gym.rollout
	// span's start) are the times; null when not known.
	Submit         *time.Time `json:"submit"`
	Start          *time.Time `json:"start"`
	PrologStart    *time.Time `json:"prolog_start"`
	CollectorReady *time.Time `json:"collector_ready"`
	BatchStart     *time.Time `json:"batch_start"`
	FirstRollout   *time.Time `json:"first_rollout"`
	// Parts are the steps between the times, in order.
	Parts []TimePart `json:"parts"`
	// TotalSeconds is FirstRollout - Submit (else from the earliest time
	// known, TotalFrom naming it); null without a first rollout.
	TotalSeconds Value  `json:"total_seconds"`
	TotalFrom    string `json:"total_from,omitempty"`
	// Why says what is missing when some part is null.
	Why []string `json:"why,omitempty"`
}

// TimePart is one part of FirstRollout.
type TimePart struct {
	// Name is "queue wait", "start to prolog", "prolog (collector start)",
	// "collector ready to batch script" or "batch script to first
	// rollout"; then, splitting the last by Gym's start-up spans, "batch
	// script to Gym start-up", "Gym start-up: <stage>" per stage and "Gym
	// start-up to first rollout".
	Name    string `json:"name"`
	Seconds Value  `json:"seconds"`
	// Precision is "1s" where one end is slurmctld's whole second.
	Precision string `json:"precision,omitempty"`
	// Within names the part this one splits ("batch script to first
	// rollout", split by Gym's start-up spans); "" for a main part.
	Within string `json:"within,omitempty"`
}

// phaseKey names one node's phases of one run (its trace: a requeued
// job's runs write to the same dirs under their own traces).
type phaseKey struct{ link, node, trace string }

// phaseRec is one phase span as read.
type phaseRec struct {
	Phase
	id, parent      string
	jobID, queueErr string
}

// phaseNode collects one node's phase spans.
type phaseNode struct {
	key     phaseKey
	restart string
	recs    []phaseRec
	dropped int
}

// phase keeps one phase span (bounded per node and in nodes).
func (a *aggregator) phase(sp *span, node, restart string) {
	k := phaseKey{a.cur.src.Link, node, sp.TraceID}
	pn := a.phaseNodes[k]
	if pn == nil {
		if len(a.phaseNodes) >= maxPhaseNodes {
			a.phasesDropped++
			return
		}
		pn = &phaseNode{key: k, restart: restart}
		a.phaseNodes[k] = pn
		a.phaseOrder = append(a.phaseOrder, pn)
	}
	if len(pn.recs) >= maxNodePhases {
		pn.dropped++
		return
	}
	get := func(key string) (anyValue, bool) {
		for _, at := range sp.Attributes {
			if at.Key == key {
				return at.Value, true
			}
		}
		return anyValue{}, false
	}
	known := func(key string) bool {
		v, ok := get(key)
		return !ok || v.BoolValue == nil || *v.BoolValue
	}
	intOf := func(key string) (int, bool) {
		v, ok := get(key)
		if !ok {
			return 0, false
		}
		n, err := strconv.ParseInt(v.text(), 10, 64)
		return int(n), err == nil
	}
	st, en := unixNano(int64(sp.Start)), unixNano(int64(sp.End))
	r := phaseRec{id: sp.SpanID, parent: sp.ParentSpanID}
	r.Name, r.SpanStart, r.SpanEnd, r.DurationSeconds = sp.Name, st, en, Value(math.NaN())
	if sp.Name == phaseStep {
		v, _ := get(vocab.AttrStepID)
		r.Step = v.text()
	}
	if known(vocab.AttrStartKnown) {
		r.Start = &st
	}
	if known(vocab.AttrEndKnown) {
		r.End = &en
	}
	if r.Start != nil && r.End != nil {
		r.DurationSeconds = Value(en.Sub(st).Seconds())
	}
	if v, ok := get(vocab.AttrTimePrecision); ok {
		r.Precision = v.text()
	}
	if n, ok := intOf(vocab.AttrStepExitCode); ok {
		r.ExitCode = &n
	}
	if n, ok := intOf(vocab.AttrStepSignal); ok {
		r.Signal = &n
	}
	r.Tasks, _ = intOf(vocab.AttrStepTasks)
	if code, ok := intOf(vocab.AttrJobExitCode); ok && sp.Name == phaseEpilog {
		je := &JobExit{ExitCode: code, From: "SLURM_JOB_EXIT_CODE"}
		je.Signal, _ = intOf(vocab.AttrJobSignal)
		je.DerivedExitCode, _ = intOf(vocab.AttrJobDerivedExitCode)
		je.DerivedSignal, _ = intOf(vocab.AttrJobDerivedSignal)
		if v, ok := get(vocab.AttrJobExitFrom); ok {
			je.From = v.text()
		}
		r.JobExit = je
	}
	if sp.Status.Code == statusError {
		r.Error = sp.Status.Message
		if r.Error == "" {
			r.Error = "error"
		}
	} else {
		r.Note = sp.Status.Message
	}
	if sp.Name == phaseAggregated {
		ag := &AggregatedSteps{}
		ag.Count, _ = intOf(vocab.AttrStepsCount)
		ag.Failed, _ = intOf(vocab.AttrStepsFailed)
		ag.WorstExitCode, _ = intOf(vocab.AttrStepsWorstExitCode)
		ms, _ := intOf(vocab.AttrStepsTotalMs)
		ag.TotalSeconds = float64(ms) / 1000
		ag.Kept, _ = intOf(vocab.AttrStepsKept)
		r.Aggregated = ag
	}
	if sp.Name == phaseJob {
		v, _ := get(vocab.AttrJobID)
		r.jobID = v.text()
		if v, ok := get(vocab.AttrQueueUnknown); ok {
			r.queueErr = v.text()
		}
	}
	pn.recs = append(pn.recs, r)
}

func unixNano(ns int64) time.Time {
	if ns <= 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// phaseRank orders phases that start together: the job, then its parts in
// the order they follow each other.
var phaseRank = map[string]int{phaseJob: 0, phaseQueueWait: 1, phaseProlog: 2, phaseStep: 3, phaseBatch: 4, phaseFinalWait: 5, phaseAggregated: 6, phaseEpilog: 7, phaseDrain: 8}

// phases returns the nodes' phases in the order of their dirs.
func (a *aggregator) phases() []NodePhases {
	out := []NodePhases{}
	for _, pn := range a.phaseOrder {
		np := NodePhases{Node: pn.key.node, Link: pn.key.link, Restart: pn.restart, TraceID: pn.key.trace, Dropped: pn.dropped, Phases: []Phase{}}
		recs := orderPhases(pn.recs)
		for _, r := range recs {
			if r.jobID != "" {
				np.JobID = r.jobID
			}
			if r.queueErr != "" {
				np.QueueWaitUnknown = r.queueErr
			}
			np.Phases = append(np.Phases, r.Phase)
		}
		out = append(out, np)
	}
	return out
}

// orderPhases puts a node's phases in the order the report shows them:
// slurm.job first, then the others by start (at one start, in the order
// phases follow each other), each directly followed by its children (the
// batch step's script and final wait).
func orderPhases(in []phaseRec) []phaseRec {
	recs := append([]phaseRec(nil), in...)
	sort.SliceStable(recs, func(i, j int) bool {
		x, y := recs[i], recs[j]
		if (x.Name == phaseJob) != (y.Name == phaseJob) {
			return x.Name == phaseJob
		}
		if !x.SpanStart.Equal(y.SpanStart) {
			return x.SpanStart.Before(y.SpanStart)
		}
		return phaseRank[x.Name] < phaseRank[y.Name]
	})
	ids := map[string]bool{}
	for _, r := range recs {
		if r.Name == phaseStep && r.id != "" {
			ids[r.id] = true
		}
	}
	children := map[string][]phaseRec{}
	out := make([]phaseRec, 0, len(recs))
	for _, r := range recs {
		if (r.Name == phaseBatch || r.Name == phaseFinalWait) && ids[r.parent] {
			children[r.parent] = append(children[r.parent], r)
		}
	}
	for _, r := range recs {
		if (r.Name == phaseBatch || r.Name == phaseFinalWait) && ids[r.parent] {
			continue
		}
		out = append(out, r)
		if r.Name == phaseStep {
			out = append(out, children[r.id]...)
			delete(children, r.id) // a repeated span id: its children once
		}
	}
	return out
}

// find returns the node's first phase of that name (and step), or nil.
func (np *NodePhases) find(name, step string) *Phase {
	for i := range np.Phases {
		if p := &np.Phases[i]; p.Name == name && (step == "" || p.Step == step) {
			return p
		}
	}
	return nil
}

// firstRollout answers where the time went between the submit and the
// first rollout, from the batch node of the job's first run read (a later
// link of a chain is not; of a requeued job's runs, the first in the
// files).
func (a *aggregator) firstRollout(phases []NodePhases) FirstRollout {
	fr := FirstRollout{Parts: []TimePart{}, TotalSeconds: Value(math.NaN())}
	var batch, first *NodePhases
	trace := ""
	for i := range phases {
		np := &phases[i]
		if np.Link == "" && trace == "" && (np.find(phaseStep, "batch") != nil || np.find(phaseQueueWait, "") != nil) {
			trace = np.TraceID // the first run with a batch step or a queue wait
		}
	}
	for i := range phases {
		np := &phases[i]
		if np.Link != "" || np.TraceID != trace {
			continue
		}
		if batch == nil && np.find(phaseStep, "batch") != nil {
			batch = np
		}
		if first == nil && np.find(phaseQueueWait, "") != nil {
			first = np
		}
	}
	if batch == nil {
		batch = first
	}
	if first == nil {
		first = batch
	}
	if a.rolloutFirst > 0 {
		t := unixMs(a.rolloutFirst)
		fr.FirstRollout, fr.RolloutNode = &t, a.rolloutFirstNode
	}
	if batch == nil {
		if len(phases) == 0 {
			fr.Why = append(fr.Why, "no Slurm phase spans in the files (a job not started by the plugin's prolog, or files from before they were sent)")
		} else {
			fr.Why = append(fr.Why, "no batch step and no queue wait among the Slurm phase spans of the job's first run")
		}
	} else {
		fr.Node = batch.Node
	}
	if first != nil {
		if q := first.find(phaseQueueWait, ""); q != nil {
			fr.Submit, fr.Start = q.Start, q.End
		} else if first.QueueWaitUnknown != "" {
			fr.Why = append(fr.Why, "queue wait not known: "+first.QueueWaitUnknown)
		} else {
			fr.Why = append(fr.Why, "no slurm.queue_wait span (the first node sends it once Slurm answers its query)")
		}
	}
	if batch != nil {
		if p := batch.find(phaseProlog, ""); p != nil {
			fr.PrologStart, fr.CollectorReady = p.Start, p.End
			if p.Start == nil {
				fr.Why = append(fr.Why, "the prolog's start was not handed on to the collector's supervisor")
			}
		}
		if b := batch.find(phaseBatch, ""); b != nil {
			fr.BatchStart = b.Start
		} else if s := batch.find(phaseStep, "batch"); s != nil {
			fr.BatchStart = s.Start
		}
	}
	if fr.FirstRollout == nil {
		fr.Why = append(fr.Why, "no "+spanRollout+" span: the first rollout's start is only in its span")
	}
	between := func(name string, from, to *time.Time, precision string) {
		p := TimePart{Name: name, Seconds: Value(math.NaN()), Precision: precision}
		if from != nil && to != nil {
			p.Seconds = Value(to.Sub(*from).Seconds())
		}
		fr.Parts = append(fr.Parts, p)
	}
	between("queue wait", fr.Submit, fr.Start, "1s")
	between("start to prolog", fr.Start, fr.PrologStart, "1s")
	between("prolog (collector start)", fr.PrologStart, fr.CollectorReady, "")
	between("collector ready to batch script", fr.CollectorReady, fr.BatchStart, "")
	between("batch script to first rollout", fr.BatchStart, fr.FirstRollout, "")
	if fr.FirstRollout != nil {
		for _, from := range []struct {
			t    *time.Time
			name string
		}{{fr.Submit, "submit"}, {fr.Start, "start"}, {fr.PrologStart, "prolog start"}, {fr.CollectorReady, "collector ready"}, {fr.BatchStart, "batch script start"}} {
			if from.t != nil {
				fr.TotalSeconds, fr.TotalFrom = Value(fr.FirstRollout.Sub(*from.t).Seconds()), from.name
				break
			}
		}
	}
	return fr
}

// phaseLabel is a phase's short name for the text and the chart.
func phaseLabel(p Phase) string {
	switch p.Name {
	case phaseJob:
		return "job"
	case phaseQueueWait:
		return "queue wait"
	case phaseProlog:
		return "prolog"
	case phaseStep:
		return "step " + p.Step
	case phaseBatch:
		return "  batch script"
	case phaseFinalWait:
		return "  final wait"
	case phaseEpilog:
		return "epilog"
	case phaseDrain:
		return "drain"
	case phaseAggregated:
		if p.Aggregated != nil {
			return fmt.Sprintf("steps (%d more)", p.Aggregated.Count)
		}
		return "steps (more)"
	}
	return p.Name
}
