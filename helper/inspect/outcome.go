package inspect

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
)

// Outcome is how the job ended, in the terms of seff and sacct, with the
// Gym answer and what reached the backend: the report's first block
// (`outcome` in --json). What cannot be known is null (or "unknown") with
// why, never made up.
type Outcome struct {
	// JobID is the job's id (the receipts' or the phase spans'); "" when
	// no file names it.
	JobID string `json:"job_id"`
	// State is sacct's job state (COMPLETED, FAILED, CANCELLED, TIMEOUT,
	// OUT_OF_MEMORY, ...) when StateFrom is "sacct"; when "derived", from
	// the batch step's phase span: COMPLETED (exit 0), FAILED (exit code
	// above 0) or SIGNALED (a task killed by a signal: a cancel, a time
	// limit or another signal; only sacct can say which); "unknown" when
	// neither answers (StateWhy says why).
	State string `json:"state"`
	// StateFrom is "sacct", "derived" or "unknown". A state derived from
	// the job epilog's exit code (ExitCodeFrom "epilog") is COMPLETED,
	// FAILED or SIGNALED as from the batch step.
	StateFrom string `json:"state_from"`
	// StateWhy says what the state was derived from, or why it is not
	// known.
	StateWhy string `json:"state_why,omitempty"`
	// Sacct is why sacct was not asked or did not answer ("" when it
	// answered, or when it was not asked at all: Build alone reads files).
	Sacct string `json:"sacct,omitempty"`
	// ExitCode and Signal are the batch script's (sacct's ExitCode
	// "code:signal"; else the job's exit code slurmd gave the job epilog,
	// SLURM_JOB_EXIT_CODE, kept on the slurm.epilog span; else the batch
	// step's phase span); null when not known. ExitCodeFrom names the
	// source: "sacct", "epilog" or "batch step" ("" when not known).
	ExitCode     *int   `json:"exit_code"`
	Signal       *int   `json:"signal"`
	ExitCodeFrom string `json:"exit_code_from,omitempty"`
	// ElapsedSeconds is the job's elapsed time as sacct counts it, from its
	// start to its end: sacct's ElapsedRaw, or from the phase spans (the
	// start slurmctld gives the first node, else the earliest slurm.job
	// span's start, to the batch step's end, else the latest slurm.job
	// span's end, which takes in the epilog and the drain); null when not
	// known (ElapsedWhy). ElapsedFrom names the two ends used.
	ElapsedSeconds Value  `json:"elapsed_seconds"`
	ElapsedFrom    string `json:"elapsed_from,omitempty"`
	ElapsedWhy     string `json:"elapsed_why,omitempty"`
	// QueueWaitSeconds is the submit to the start (slurm.queue_wait,
	// whole seconds); null when not known.
	QueueWaitSeconds Value `json:"queue_wait_seconds"`
	// Nodes is the count of nodes that wrote files, Hostlist the same as a
	// Slurm hostlist in natural order (gn[1-16]).
	Nodes    int    `json:"nodes"`
	Hostlist string `json:"hostlist"`
	// Rollouts, PassRate (0..1), Verified and RolloutsPerMinute are
	// Summary's and Gym's (null when not known).
	Rollouts          Value `json:"rollouts"`
	PassRate          Value `json:"pass_rate"`
	Verified          Value `json:"verified"`
	RolloutsPerMinute Value `json:"rollouts_per_minute"`
	// Delivery and DeliveryState are Summary's: what reached the backend,
	// and "ok", "lost" or "unknown".
	Delivery      string `json:"delivery"`
	DeliveryState string `json:"delivery_state"`
}

// SacctTimeout bounds the sacct query of Account.
const SacctTimeout = 5 * time.Second

// outcome fills r.Outcome from the files (receipts, phases, Summary read).
func (r *Report) outcome() {
	o := Outcome{State: "unknown", StateFrom: "unknown", ElapsedSeconds: Value(math.NaN()), QueueWaitSeconds: Value(math.NaN()),
		Nodes: len(r.Job.Nodes), Hostlist: slurm.CompressHostlist(r.Job.Nodes), Rollouts: r.Summary.Rollouts, PassRate: r.Summary.PassRate,
		Verified: r.Summary.Verified, RolloutsPerMinute: r.Gym.RolloutsPerMinute, Delivery: r.Summary.Delivery, DeliveryState: r.Summary.DeliveryState}
	for _, nr := range r.Receipts {
		if nr.Receipt != nil && nr.Receipt.JobID != "" && o.JobID == "" {
			o.JobID = nr.Receipt.JobID
		}
	}
	run := r.firstRun()
	for _, np := range run {
		if o.JobID == "" && np.JobID != "" {
			o.JobID = np.JobID
		}
	}
	if o.JobID == "" {
		if ids := r.Job.Identity["slurm_job_id"]; len(ids) == 1 {
			o.JobID = ids[0].Text
		}
	}
	if fr := r.FirstRollout; fr.Submit != nil && fr.Start != nil {
		o.QueueWaitSeconds = Value(fr.Start.Sub(*fr.Submit).Seconds())
	}
	o.deriveState(run, r.Health.Dirs)
	o.deriveElapsed(run, r.FirstRollout.Start)
	r.Outcome = o
}

// firstRun is the phases of the job's first run read (the run whose trace
// FirstRollout uses: the first with a batch step or a queue wait, else the
// first of all), without later links of a chain.
func (r *Report) firstRun() []NodePhases {
	trace := ""
	for _, np := range r.Phases {
		if np.Link == "" && (np.find(phaseStep, "batch") != nil || np.find(phaseQueueWait, "") != nil) {
			trace = np.TraceID
			break
		}
	}
	if trace == "" {
		for _, np := range r.Phases {
			if np.Link == "" {
				trace = np.TraceID
				break
			}
		}
	}
	var out []NodePhases
	for _, np := range r.Phases {
		if np.Link == "" && np.TraceID == trace {
			out = append(out, np)
		}
	}
	return out
}

// deriveState reads the state and exit code from the batch step's phase
// span.
func (o *Outcome) deriveState(run []NodePhases, dirs []DirHealth) {
	var batch *Phase
	node := ""
	for i := range run {
		if p := run[i].find(phaseStep, "batch"); p != nil {
			batch, node = p, run[i].Node
			break
		}
	}
	// The job's exit code as slurmd gave it to the job epilog: Slurm's
	// own word (the batch node's epilog first).
	var je *JobExit
	jeNode := ""
	for i := range run {
		if p := run[i].find(phaseEpilog, ""); p != nil && p.JobExit != nil && (je == nil || run[i].Node == node) {
			je, jeNode = p.JobExit, run[i].Node
		}
	}
	if je != nil {
		code, sig := je.ExitCode, je.Signal
		o.ExitCodeFrom = "epilog"
		o.StateFrom = "derived"
		src := fmt.Sprintf("the job epilog on %s had %s", jeNode, je.From)
		switch {
		case sig != 0:
			o.Signal, o.State = &sig, "SIGNALED"
			o.StateWhy = fmt.Sprintf("%s: the batch script was killed by signal %d: a cancel, a time limit or another signal (sacct says which)", src, sig)
		case code == 0:
			o.ExitCode, o.State = &code, "COMPLETED"
			o.StateWhy = src + ": exit code 0"
		default:
			o.ExitCode, o.State = &code, "FAILED"
			o.StateWhy = fmt.Sprintf("%s: exit code %d", src, code)
		}
		return
	}
	if batch == nil {
		o.StateWhy = "no batch step span in the files: the job still runs, or its batch node's files or phase spans are not here"
		for _, d := range dirs {
			if d.State != nil && (d.State.Status == jobdir.StatusStarting || d.State.Status == jobdir.StatusReady || d.State.Status == jobdir.StatusDraining) {
				o.StateWhy = fmt.Sprintf("no batch step in the files, and %s's state.json says its collector is %s: the job may still run", nodeOr(d), d.State.Status)
				break
			}
		}
		return
	}
	o.ExitCode, o.Signal = batch.ExitCode, batch.Signal
	if o.ExitCode != nil || o.Signal != nil {
		o.ExitCodeFrom = "batch step"
	}
	switch {
	case batch.End == nil:
		o.StateWhy = "the batch step's end was not seen on " + node + " (its span was cut at the drain)"
	case batch.Signal != nil:
		o.State, o.StateFrom = "SIGNALED", "derived"
		o.StateWhy = fmt.Sprintf("the batch step on %s was killed by signal %d: a cancel, a time limit or another signal (sacct says which)", node, *batch.Signal)
	case batch.ExitCode == nil:
		o.StateWhy = "the batch step on " + node + " ended without any task's exit status known"
	case *batch.ExitCode == 0:
		o.State, o.StateFrom = "COMPLETED", "derived"
		o.StateWhy = "the batch step on " + node + " exited 0"
	default:
		o.State, o.StateFrom = "FAILED", "derived"
		o.StateWhy = fmt.Sprintf("the batch step on %s exited %d", node, *batch.ExitCode)
	}
}

// deriveElapsed is the time from the job's start (slurmctld's, else the
// earliest slurm.job span's start) to the latest slurm.job span's end.
func (o *Outcome) deriveElapsed(run []NodePhases, start *time.Time) {
	var first, last time.Time
	endKnown, jobs := true, 0
	for _, np := range run {
		j := np.find(phaseJob, "")
		if j == nil {
			continue
		}
		jobs++
		if j.Start != nil && (first.IsZero() || j.Start.Before(first)) {
			first = *j.Start
		}
		if j.End == nil {
			endKnown = false
		} else if j.End.After(last) {
			last = *j.End
		}
	}
	from := "start"
	switch {
	case jobs == 0:
		o.ElapsedWhy = "no slurm.job span in the files"
		return
	case !endKnown || last.IsZero():
		o.ElapsedWhy = "a node's slurm.job span has no known end"
		return
	case start != nil:
		first = *start
	case !first.IsZero():
		from = "the first slurm.job span's start"
	default:
		o.ElapsedWhy = "no slurm.job span has a known start"
		return
	}
	to := "the last slurm.job span's end"
	// slurmctld's end (sacct's) is the batch script's end: the job spans
	// go on through the epilog and the drain.
	for _, np := range run {
		if b := np.find(phaseStep, "batch"); b != nil && b.End != nil {
			last, to = *b.End, "the batch step's end"
			break
		}
	}
	o.ElapsedSeconds, o.ElapsedFrom = Value(last.Sub(first).Seconds()), from+" to "+to
}

// AccountingQuery asks Slurm's accounting about a job
// (slurm.QueryAccounting's signature).
type AccountingQuery func(ctx context.Context, id uint32) (slurm.Accounting, bool, error)

// Account replaces the outcome's state, exit code and elapsed time with
// what query (sacct) says of the job, within SacctTimeout of ctx. Where
// the job id is not known, query fails or does not know the job, the
// outcome keeps what the files say and Sacct says why.
func (r *Report) Account(ctx context.Context, query AccountingQuery) {
	o := &r.Outcome
	id, err := slurm.ParseJobID(o.JobID)
	if err != nil {
		o.Sacct = "not asked: the job id is not known from the files"
		return
	}
	ctx, cancel := context.WithTimeout(ctx, SacctTimeout)
	defer cancel()
	a, known, err := query(ctx, id)
	switch {
	case err != nil:
		o.Sacct = "no answer: " + err.Error()
		return
	case !known:
		o.Sacct = "sacct does not know job " + o.JobID
		return
	}
	o.Sacct = ""
	code, sig := a.ExitCode, a.Signal
	o.State, o.StateFrom, o.StateWhy, o.ExitCode, o.Signal, o.ExitCodeFrom = a.State, "sacct", "", &code, nil, "sacct"
	if sig != 0 {
		o.Signal = &sig
	}
	o.ElapsedSeconds, o.ElapsedFrom, o.ElapsedWhy = Value(a.ElapsedSeconds), "sacct's ElapsedRaw (whole seconds)", ""
}

// nodeGroups folds nodes by a key: each key's nodes as a hostlist, keys
// in the order of their first node (natural order).
func nodeGroups(nodes []string, key func(string) string) (keys []string, lists map[string][]string) {
	ns := append([]string(nil), nodes...)
	sort.SliceStable(ns, func(i, j int) bool { return slurm.NaturalLess(ns[i], ns[j]) })
	lists = map[string][]string{}
	for _, n := range ns {
		k := key(n)
		if lists[k] == nil {
			keys = append(keys, k)
		}
		lists[k] = append(lists[k], n)
	}
	return keys, lists
}
