package supervise

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
	"github.com/gym-otel-spank/gym-otel-spank/helper/timing"
)

// The queue wait: the job's submit time is not in the prolog's
// environment, so the supervisor of the job's first node (and only that
// one: one query per job, never one per node) asks squeue once, after the
// collector is ready, for the job's submit and start times (whole seconds,
// as slurmctld keeps them) and adds slurm.queue_wait, from submit to
// start, under the node's slurm.job span, which then starts at the
// submit. No answer: no queue-wait span, and the job's span says why.

// SubmitQuery asks Slurm for a job's submit and start times.
type SubmitQuery func(ctx context.Context, jobID string) (submit, start time.Time, err error)

// squeueSubmit is SubmitQuery by squeue (%V|%S, SLURM_TIME_FORMAT=%s: unix
// seconds), bounded by timing.LivenessQueryBound.
func squeueSubmit(ctx context.Context, jobID string) (time.Time, time.Time, error) {
	if _, err := strconv.ParseUint(jobID, 10, 32); err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("job id %q: %w", jobID, err)
	}
	bin, err := slurm.Bin("squeue")
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, timing.LivenessQueryBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-h", "--states=all", "-j", jobID, "-o", "%V|%S")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "SLURM_CONF=" + os.Getenv("SLURM_CONF"), "SLURM_TIME_FORMAT=%s"}
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("squeue -j %s: %v", jobID, err)
	}
	return parseSubmit(out.String())
}

// parseSubmit reads "<submit>|<start>" in unix seconds.
func parseSubmit(text string) (time.Time, time.Time, error) {
	line, _, _ := strings.Cut(strings.TrimSpace(text), "\n")
	a, b, ok := strings.Cut(line, "|")
	sub, err1 := strconv.ParseInt(a, 10, 64)
	st, err2 := strconv.ParseInt(b, 10, 64)
	if !ok || err1 != nil || err2 != nil || sub <= 0 || st < sub {
		return time.Time{}, time.Time{}, fmt.Errorf("squeue: not a submit and start time: %q", line)
	}
	return time.Unix(sub, 0), time.Unix(st, 0), nil
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
	p.pending = append(p.pending, p.span("slurm.queue_wait", p.spanID("queue_wait"), p.root, submit, start,
		strAttr("slurm.time_precision", "1s")))
}
