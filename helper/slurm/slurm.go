// Package slurm is what the plugin asks Slurm about a job, in one place:
// where Slurm's commands are, a job's state and array ids, which states
// are final, and what accounting says of a finished job. Every query runs
// squeue or sacct with a format that prints only fields Slurm itself sets
// (ids, states, exit codes and times, never a job name, comment or path a
// user chose), reads a bounded amount of output, and is bounded in time by
// its context; they share one runner (run).
package slurm

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Dirs are where Slurm's commands are looked for before PATH (a job prolog
// has no PATH; the supervisor's PATH is fixed): Debian and RPM installs,
// /usr/local and /opt/slurm builds.
var Dirs = []string{"/usr/bin", "/usr/local/bin", "/opt/slurm/bin"}

// Bin returns the path of Slurm command name (e.g. "squeue"): the first of
// Dirs that has it, else PATH's.
func Bin(name string) (string, error) {
	for _, d := range Dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s: not in %s nor on PATH", name, strings.Join(Dirs, ", "))
	}
	return p, nil
}

// finalStates are the job states after which a job runs nothing anymore
// (squeue's %T, long names). A job in any other state (PENDING, RUNNING,
// SUSPENDED, COMPLETING, CONFIGURING, REQUEUED, ...) may still own
// processes and records on its nodes.
var finalStates = map[string]bool{
	"BOOT_FAIL": true, "CANCELLED": true, "COMPLETED": true, "DEADLINE": true,
	"FAILED": true, "NODE_FAIL": true, "OUT_OF_MEMORY": true, "PREEMPTED": true,
	"TIMEOUT": true, "REVOKED": true, "SPECIAL_EXIT": true,
}

// Final reports whether state is a final job state.
func Final(state string) bool { return finalStates[state] }

// Job is what squeue says of one job.
type Job struct {
	// ID is the job's own id.
	ID uint32
	// ArrayJobID and ArrayTaskID are the array's job id and this task's
	// index, "" when the job is not an array task.
	ArrayJobID, ArrayTaskID string
	// State is the job's state, e.g. RUNNING or COMPLETED.
	State string
}

// maxOutput bounds what is read of a command's output, bytes.
const maxOutput = 64 * 1024

// ParseJobID reads a job id as Slurm gives it to a job's processes
// (SLURM_JOB_ID: decimal, 32 bits), for Query, QuerySubmit and
// QueryAccounting. The error names the text.
func ParseJobID(text string) (uint32, error) {
	id, err := strconv.ParseUint(text, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("job id %q: %w", text, err)
	}
	return uint32(id), nil
}

// Query asks squeue for job id. known is false when slurmctld no longer
// knows the job (it ended longer than MinJobAge ago, or never existed);
// an error means no answer (squeue missing, the controller unreachable, the
// context's deadline).
func Query(ctx context.Context, id uint32) (job Job, known bool, err error) {
	ids := strconv.FormatUint(uint64(id), 10)
	text, runErr := run(ctx, "squeue", "-h", "--states=all", "-j", ids, "-o", "%A|%F|%K|%T")
	if ctx.Err() != nil {
		return Job{}, false, fmt.Errorf("squeue -j %s: %w", ids, ctx.Err())
	}
	if strings.Contains(text, "Invalid job id") {
		return Job{}, false, nil
	}
	if runErr != nil {
		return Job{}, false, fmt.Errorf("squeue -j %s: %v: %s", ids, runErr, firstLine(text))
	}
	return parse(text, id)
}

// QuerySubmit asks squeue for job id's submit and start times (whole
// seconds, as slurmctld keeps them; squeue's %V and %S with
// SLURM_TIME_FORMAT=%s). Errors: no answer (as Query's), or no plausible
// pair (the job not known, a start before the submit, "N/A").
func QuerySubmit(ctx context.Context, id uint32) (submit, start time.Time, err error) {
	ids := strconv.FormatUint(uint64(id), 10)
	text, err := runTimeFormat(ctx, "%s", "squeue", "-h", "--states=all", "-j", ids, "-o", "%V|%S")
	if ctx.Err() != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("squeue -j %s: %w", ids, ctx.Err())
	}
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("squeue -j %s: %v: %s", ids, err, firstLine(text))
	}
	return parseSubmit(text)
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

// run is runTimeFormat with SLURM_TIME_FORMAT=standard.
func run(ctx context.Context, name string, args ...string) (string, error) {
	return runTimeFormat(ctx, "standard", name, args...)
}

// runTimeFormat runs Slurm command name (found by Bin) with args, with
// only PATH, SLURM_TIME_FORMAT=timeFormat and SLURM_CONF (when set) in its
// environment, bounded by ctx, and returns its output (stdout then stderr,
// at most maxOutput bytes of each). The error is Bin's, or the command's
// exit.
func runTimeFormat(ctx context.Context, timeFormat, name string, args ...string) (string, error) {
	bin, err := Bin(name)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "SLURM_TIME_FORMAT=" + timeFormat}
	// An empty SLURM_CONF is not "unset" to Slurm: it retries stat("")
	// for 60 s. Set it only when the caller has it.
	if c := os.Getenv("SLURM_CONF"); c != "" {
		cmd.Env = append(cmd.Env, "SLURM_CONF="+c)
	}
	var out bytes.Buffer
	cmd.Stdout = &limitedWriter{w: &out, n: maxOutput}
	cmd.Stderr = &limitedWriter{w: &out, n: maxOutput}
	err = cmd.Run()
	return out.String(), err
}

// Accounting is what sacct says of a job's allocation (sacct -X).
type Accounting struct {
	// ID is the job id asked for.
	ID uint32
	// State is the job's state without its detail ("CANCELLED", not
	// "CANCELLED by 1000").
	State string
	// ExitCode and Signal are the batch script's exit code and the signal
	// that ended it (sacct's ExitCode "code:signal").
	ExitCode, Signal int
	// ElapsedSeconds is the allocation's elapsed time (sacct's ElapsedRaw),
	// whole seconds.
	ElapsedSeconds int64
}

// QueryAccounting asks sacct for job id's allocation. known is false when
// the accounting storage has no such job; an error means no answer (sacct
// missing, accounting not configured or unreachable, the context's
// deadline).
func QueryAccounting(ctx context.Context, id uint32) (acct Accounting, known bool, err error) {
	ids := strconv.FormatUint(uint64(id), 10)
	text, runErr := run(ctx, "sacct", "-n", "-P", "-X", "-j", ids, "-o", "JobIDRaw,State,ExitCode,ElapsedRaw")
	if ctx.Err() != nil {
		return Accounting{}, false, fmt.Errorf("sacct -j %s: %w", ids, ctx.Err())
	}
	if runErr != nil && strings.TrimSpace(text) == "" {
		return Accounting{}, false, fmt.Errorf("sacct -j %s: %v", ids, runErr)
	}
	if runErr != nil {
		return Accounting{}, false, fmt.Errorf("sacct -j %s: %v: %s", ids, runErr, firstLine(text))
	}
	return parseAccounting(text, id)
}

// parseAccounting reads sacct's "JobIDRaw|State|ExitCode|ElapsedRaw" lines
// for job id.
func parseAccounting(text string, id uint32) (Accounting, bool, error) {
	want := strconv.FormatUint(uint64(id), 10)
	for _, line := range strings.Split(text, "\n") {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) != 4 || f[0] != want {
			continue
		}
		a := Accounting{ID: id}
		a.State, _, _ = strings.Cut(f[1], " ")
		code, sig, ok := strings.Cut(f[2], ":")
		c, cerr := strconv.Atoi(code)
		s, serr := strconv.Atoi(sig)
		e, eerr := strconv.ParseInt(f[3], 10, 64)
		if a.State == "" || !ok || cerr != nil || serr != nil || eerr != nil {
			return Accounting{}, false, fmt.Errorf("sacct: job %s: state %q, exit code %q, elapsed %q: want a state, code:signal and whole seconds", want, f[1], f[2], f[3])
		}
		a.ExitCode, a.Signal, a.ElapsedSeconds = c, s, e
		return a, true, nil
	}
	if strings.TrimSpace(text) == "" {
		return Accounting{}, false, nil
	}
	return Accounting{}, false, fmt.Errorf("sacct: no line for job %s: %s", want, firstLine(text))
}

// parse reads squeue's "%A|%F|%K|%T" lines for job id.
func parse(text string, id uint32) (Job, bool, error) {
	want := strconv.FormatUint(uint64(id), 10)
	for _, line := range strings.Split(text, "\n") {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) != 4 || f[0] != want {
			continue
		}
		j := Job{ID: id, State: f[3]}
		if f[2] != "N/A" && f[2] != "" {
			if _, err := strconv.ParseUint(f[2], 10, 32); err != nil {
				return Job{}, false, fmt.Errorf("squeue: array task id %q of job %s is not one task", f[2], want)
			}
			j.ArrayJobID, j.ArrayTaskID = f[1], f[2]
		}
		if j.State == "" {
			return Job{}, false, fmt.Errorf("squeue: no state for job %s", want)
		}
		return j, true, nil
	}
	if strings.TrimSpace(text) == "" {
		return Job{}, false, nil
	}
	return Job{}, false, fmt.Errorf("squeue: no line for job %s: %s", want, firstLine(text))
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// limitedWriter keeps the first n bytes written and discards the rest.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		if _, err := l.w.Write(p[:k]); err != nil {
			return 0, err
		}
		l.n -= k
	}
	return len(p), nil
}
