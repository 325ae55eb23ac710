package supervise

import (
	"context"
	"fmt"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
	"github.com/gym-otel-spank/gym-otel-spank/helper/timing"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
)

// The queue wait: the job's submit time is not in the prolog's
// environment, so the supervisor of the job's first node (and only that
// one: one query per job, never one per node) asks squeue once, after the
// collector is ready, for the job's submit and start times (whole seconds,
// as slurmctld keeps them) and adds slurm.queue_wait, from submit to
// start, under the node's slurm.job span, which then starts at the
// submit. No answer: no queue-wait span, and the job's span says why.
//
// It asks QueueWaitDelay after the ready report, not at it: squeue's
// start and slurmctld's answer would otherwise share the node's CPUs with
// the prolog's last steps and Slurm's launch of the job's first step
// (docs/performance.md, P2). A job that drains before asks at the drain,
// which waits for the answer at most QueueWaitDrainBound.

// QueueWaitDelay is how long after the ready report the first node's
// supervisor asks for the queue wait.
const QueueWaitDelay = 500 * time.Millisecond

// QueueWaitDrainBound is how long the drain waits for the queue wait's
// answer before the job's span is sent without it.
const QueueWaitDrainBound = 500 * time.Millisecond

// SubmitQuery asks Slurm for a job's submit and start times.
type SubmitQuery func(ctx context.Context, jobID string) (submit, start time.Time, err error)

// squeueSubmit is SubmitQuery by squeue (slurm.QuerySubmit), bounded by
// timing.LivenessQueryBound.
func squeueSubmit(ctx context.Context, jobID string) (time.Time, time.Time, error) {
	id, err := slurm.ParseJobID(jobID)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, timing.LivenessQueryBound)
	defer cancel()
	return slurm.QuerySubmit(ctx, id)
}

// askQueue asks for the queue wait (queueWait, in a goroutine of its
// own) on its first call and returns the channel closed at its answer.
func (p *phases) askQueue(ctx context.Context, q SubmitQuery) <-chan struct{} {
	p.queueAsked.Do(func() {
		go func() {
			defer close(p.queueDone)
			p.queueWait(ctx, q)
		}()
	})
	return p.queueDone
}

// awaitQueue waits for the queue wait's answer (done) at most bound; with
// none by then, the job's span says so.
func (p *phases) awaitQueue(done <-chan struct{}, bound time.Duration) {
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		p.mu.Lock()
		if p.submit.IsZero() && p.queueErr == "" {
			p.queueErr = fmt.Sprintf("squeue: no answer by the drain (%v after it began)", bound)
		}
		p.mu.Unlock()
	}
}

// queueWait adds the queue-wait span (see above); an error is kept for the
// job's span.
func (p *phases) queueWait(ctx context.Context, q SubmitQuery) {
	submit, start, err := q(ctx, p.facts.JobID)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return // the answer came after the drain: the spans are sent
	}
	if err != nil {
		p.queueErr = err.Error()
		return
	}
	p.submit = submit
	p.pending = append(p.pending, p.span(vocab.SpanQueueWait, p.spanID("queue_wait"), p.root, submit, start,
		strAttr(vocab.AttrTimePrecision, "1s")))
}
