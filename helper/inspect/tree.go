package inspect

import (
	"fmt"
	"sort"
	"time"
)

// The job's trace tree: job (a run's phase trace) -> step (its slurm.step
// span; the batch step's processes are children of its
// slurm.batch_script span) -> process (a job span whose parent is a step's
// span: the root span of a process that ran with the step's TRACEPARENT,
// spank/taskenv.c) -> rollouts (gym.rollout spans, each a trace of its
// own). A rollout is placed under the process whose span it links to
// (Gym's and the Gym stand-in's link to the context they got from
// TRACEPARENT); a rollout without such a link, under the process whose
// resource it shares (node, producer, service.instance.id, process.pid).
//
// Spans come in any order (a step's span is written at its end, after its
// processes' spans), so the spans that may be a process's are kept until
// the phases are read: every job span with a parent, by trace, dropping a
// trace's kept spans when its root span arrives (a rollout's trace: its
// children end, and are written, before it), within maxTreeCandidates.

// Bounds of the tree, whatever the files hold.
const (
	maxTreeCandidates = 16384 // job spans with a parent kept as possible processes
	maxTreeTargets    = 4096  // distinct link targets and resources of rollouts counted
	maxTreeProcesses  = 256   // processes shown per step
)

// TraceTree is the job's tree of spans: its runs (one per trace of phase
// spans), their steps, each step's processes and their rollouts.
type TraceTree struct {
	Runs []TreeRun `json:"runs"`
	// Rollouts counts every gym.rollout span; Linked and ByResource those
	// placed under a process by a span link or by the process's resource;
	// Unplaced the rest (a process outside the job's steps, a TRACEPARENT
	// of the user's, a producer that links nothing and shares no
	// process's resource).
	Rollouts   int `json:"rollouts"`
	Linked     int `json:"linked"`
	ByResource int `json:"by_resource"`
	Unplaced   int `json:"unplaced"`
	// Dropped counts the spans not kept as possible processes past the
	// bound (16384), and the rollouts' link targets and resources past
	// theirs (4096): the tree may lack processes then.
	Dropped int `json:"dropped,omitempty"`
}

// TreeRun is one run of the job: the phase spans of one trace.
type TreeRun struct {
	TraceID string `json:"trace_id"`
	// Link is the chain link's job id ("" for the job itself); Restart the
	// run's slurm_job_restart_count.
	Link    string     `json:"link,omitempty"`
	Restart string     `json:"restart_count,omitempty"`
	Steps   []TreeStep `json:"steps"`
}

// TreeStep is one step of a run on one node, with the processes that ran
// in it.
type TreeStep struct {
	Node string `json:"node"`
	// Step is the step's id ("batch", "extern", "0", ...); SpanID its
	// slurm.step span's.
	Step   string `json:"step"`
	SpanID string `json:"span_id"`
	// Start is the step span's start.
	Start     time.Time     `json:"start"`
	Processes []TreeProcess `json:"processes"`
	// MoreProcesses counts the processes past the 256 shown.
	MoreProcesses int `json:"more_processes,omitempty"`
}

// TreeProcess is one process's root span and its rollouts.
type TreeProcess struct {
	Name     string    `json:"name"`
	SpanID   string    `json:"span_id"`
	Producer string    `json:"producer"`
	Node     string    `json:"node"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	// Under is the phase span it is a child of: slurm.step, or
	// slurm.batch_script for the batch script's own processes.
	Under string `json:"under"`
	// Rollouts = Linked + ByResource: the rollouts linked to this span,
	// and those without a link whose resource is this process's.
	Rollouts   int `json:"rollouts"`
	Linked     int `json:"linked"`
	ByResource int `json:"by_resource"`
	// FirstRollout and LastRollout are the first rollout's start and the
	// last one's end (nil without rollouts).
	FirstRollout *time.Time `json:"first_rollout,omitempty"`
	LastRollout  *time.Time `json:"last_rollout,omitempty"`
}

// spanRef is one span by trace and span id.
type spanRef struct{ trace, span string }

// treeCand is a job span with a parent: a process if its parent is a
// step's span.
type treeCand struct {
	ref                   spanRef
	parent, name          string
	node, producer, ident string
	start, end            int64 // unix ms
}

// rolloutCount counts rollouts and their times.
type rolloutCount struct {
	n           int
	first, last int64 // unix ms
}

func (c *rolloutCount) add(start, end int64) {
	if c.n == 0 || start < c.first {
		c.first = start
	}
	if end > c.last {
		c.last = end
	}
	c.n++
}

// treeState is what the aggregator keeps for the tree while reading.
type treeState struct {
	cands    map[string][]treeCand // by trace
	ncands   int
	links    map[spanRef]*rolloutCount // rollouts by the span they link to
	unlinked map[string]*rolloutCount  // rollouts without links, by resource
	rollouts int
	dropped  int
}

func newTreeState() *treeState {
	return &treeState{cands: map[string][]treeCand{}, links: map[spanRef]*rolloutCount{}, unlinked: map[string]*rolloutCount{}}
}

// resourceIdent is what tells one process's resource from another's on a
// node: its producer, service.instance.id and process.pid.
func resourceIdent(node, producer string, r resource) string {
	return node + "\x00" + producer + "\x00" + r.Attributes.get("service.instance.id") + "\x00" + r.Attributes.get("process.pid")
}

// treeSpan notes one job span for the tree.
func (a *aggregator) treeSpan(sp *span, node, producer, ident string) {
	t := a.tree
	if sp.Name == spanRollout {
		t.rollouts++
		st, en := sp.Start.ms(), sp.End.ms()
		if len(sp.Links) == 0 {
			c := t.unlinked[ident]
			if c == nil {
				if len(t.unlinked) >= maxTreeTargets {
					t.dropped++
					return
				}
				c = &rolloutCount{}
				t.unlinked[ident] = c
			}
			c.add(st, en)
		}
		for _, l := range sp.Links {
			k := spanRef{l.TraceID, l.SpanID}
			c := t.links[k]
			if c == nil {
				if len(t.links) >= maxTreeTargets {
					t.dropped++
					continue
				}
				c = &rolloutCount{}
				t.links[k] = c
			}
			c.add(st, en)
		}
	}
	if sp.ParentSpanID == "" {
		// A trace's root: what was kept of its trace is below it, not
		// under a step.
		t.ncands -= len(t.cands[sp.TraceID])
		delete(t.cands, sp.TraceID)
		return
	}
	if t.ncands >= maxTreeCandidates {
		t.dropped++
		return
	}
	t.cands[sp.TraceID] = append(t.cands[sp.TraceID], treeCand{ref: spanRef{sp.TraceID, sp.SpanID}, parent: sp.ParentSpanID,
		name: sp.Name, node: node, producer: producer, ident: ident, start: sp.Start.ms(), end: sp.End.ms()})
	t.ncands++
}

// traceTree assembles the tree from the phase spans and the kept spans.
func (a *aggregator) traceTree() TraceTree {
	t := a.tree
	tree := TraceTree{Runs: []TreeRun{}, Rollouts: t.rollouts, Dropped: t.dropped}
	type stepAt struct{ run, step int }
	at := map[spanRef]stepAt{}    // a step's or a batch script's span -> its step
	under := map[spanRef]string{} // -> the phase span's name
	runOf := map[[2]string]int{}  // (link, trace) -> run
	for _, pn := range a.phaseOrder {
		rk := [2]string{pn.key.link, pn.key.trace}
		ri, ok := runOf[rk]
		if !ok {
			ri = len(tree.Runs)
			runOf[rk] = ri
			tree.Runs = append(tree.Runs, TreeRun{TraceID: pn.key.trace, Link: pn.key.link, Restart: pn.restart, Steps: []TreeStep{}})
		}
		run := &tree.Runs[ri]
		byID := map[string]int{}
		for _, rec := range pn.recs {
			if rec.Name == phaseStep {
				byID[rec.id] = len(run.Steps)
				run.Steps = append(run.Steps, TreeStep{Node: pn.key.node, Step: rec.Step, SpanID: rec.id, Start: rec.SpanStart, Processes: []TreeProcess{}})
				at[spanRef{pn.key.trace, rec.id}] = stepAt{ri, byID[rec.id]}
				under[spanRef{pn.key.trace, rec.id}] = phaseStep
			}
		}
		for _, rec := range pn.recs {
			if si, ok := byID[rec.parent]; ok && rec.Name == phaseBatch {
				at[spanRef{pn.key.trace, rec.id}] = stepAt{ri, si}
				under[spanRef{pn.key.trace, rec.id}] = phaseBatch
			}
		}
	}
	claimed := map[string]bool{} // resources whose unlinked rollouts are placed
	traces := make([]string, 0, len(t.cands))
	for tr := range t.cands {
		traces = append(traces, tr)
	}
	sort.Strings(traces)
	for _, tr := range traces {
		for _, c := range t.cands[tr] {
			pk := spanRef{tr, c.parent}
			sa, ok := at[pk]
			if !ok {
				continue
			}
			step := &tree.Runs[sa.run].Steps[sa.step]
			p := TreeProcess{Name: c.name, SpanID: c.ref.span, Producer: c.producer, Node: c.node,
				Start: unixMs(c.start), End: unixMs(c.end), Under: under[pk]}
			var rc rolloutCount
			if l := t.links[c.ref]; l != nil {
				p.Linked = l.n
				rc = *l
			}
			if u := t.unlinked[c.ident]; u != nil && !claimed[c.ident] {
				claimed[c.ident] = true
				p.ByResource = u.n
				if rc.n == 0 {
					rc = *u
				} else {
					rc.add(u.first, u.last)
					rc.n += u.n - 1
				}
			}
			p.Rollouts = p.Linked + p.ByResource
			if p.Rollouts > 0 {
				first, last := unixMs(rc.first), unixMs(rc.last)
				p.FirstRollout, p.LastRollout = &first, &last
			}
			tree.Linked += p.Linked
			tree.ByResource += p.ByResource
			if len(step.Processes) >= maxTreeProcesses {
				step.MoreProcesses++
				continue
			}
			step.Processes = append(step.Processes, p)
		}
	}
	for ri := range tree.Runs {
		// Steps by start (their processes are placed by index above).
		steps := tree.Runs[ri].Steps
		sort.SliceStable(steps, func(i, j int) bool { return steps[i].Start.Before(steps[j].Start) })
		for si := range tree.Runs[ri].Steps {
			ps := tree.Runs[ri].Steps[si].Processes
			sort.SliceStable(ps, func(i, j int) bool { return ps[i].Start.Before(ps[j].Start) })
		}
	}
	tree.Unplaced = tree.Rollouts - tree.Linked - tree.ByResource
	if tree.Unplaced < 0 {
		tree.Unplaced = 0 // a rollout linked to two processes
	}
	return tree
}

// treeLines writes the trace tree: per run, the steps that have
// processes, each process with its rollouts; then how the rollouts were
// placed.
func (t *textOut) treeLines(r *Report) {
	tr := r.TraceTree
	if len(tr.Runs) == 0 {
		return // no phase spans: no job and no steps to hang processes on
	}
	t.section("trace tree: job -> step -> process -> rollouts")
	for _, run := range tr.Runs {
		head := "  run, trace " + run.TraceID
		if run.Link != "" {
			head += ", chain link job " + run.Link
		}
		if run.Restart != "" {
			head += ", restart " + run.Restart
		}
		t.line("%s", head)
		empty := 0
		for _, st := range run.Steps {
			if len(st.Processes) == 0 {
				empty++
				continue
			}
			t.line("    %s step %s (span %s)", st.Node, st.Step, st.SpanID)
			for _, p := range st.Processes {
				what := fmt.Sprintf("%.1f s, no rollouts", p.End.Sub(p.Start).Seconds())
				if p.Rollouts > 0 {
					what = fmt.Sprintf("%.1f s, %d rollouts (%d by link, %d by resource)", p.End.Sub(p.Start).Seconds(),
						p.Rollouts, p.Linked, p.ByResource)
				}
				under := ""
				if p.Under == phaseBatch {
					under = " in the batch script"
				}
				t.wrap(fmt.Sprintf("      %s %s%s: ", p.Name, p.Producer, under), what)
			}
			if st.MoreProcesses > 0 {
				t.line("      ... %d more processes", st.MoreProcesses)
			}
		}
		if empty > 0 {
			t.line("    %d steps without a traced process", empty)
		}
	}
	line := fmt.Sprintf("%d rollouts: %d under a process (%d by link, %d by resource), %d not placed", tr.Rollouts,
		tr.Linked+tr.ByResource, tr.Linked, tr.ByResource, tr.Unplaced)
	if tr.Unplaced > 0 {
		line += " (no link to a process's span and no process's resource: a process outside the steps, or a TRACEPARENT of its own)"
	}
	t.wrap("  ", line)
	if tr.Dropped > 0 {
		t.line("  %d spans past the tree's bounds: processes may be missing", tr.Dropped)
	}
}
