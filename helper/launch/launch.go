// Package launch is the launch contract between root's side of the plugin
// (the job prolog and epilog in the plugin's Go core, helper/callbacks) and
// the job's supervisor (helper/supervise, `gym-otel-spank supervise
// --from-env`): the supervisor's environment, the descriptors the prolog
// hands it, the one readiness line it answers with, root's proof of the
// ports it reports, and root's own client of the hold socket (the epilog's
// start). Both sides import it from here, so that the plugin's core links
// none of the supervisor (its servers, the collector's configuration, the
// OTLP encoders) to start one.
package launch

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
)

// Status values of Readiness: state.json's words (jobdir.State).
const (
	StatusReady  = jobdir.StatusReady
	StatusFailed = jobdir.StatusFailed
)

// Readiness is what the supervisor tells whoever started it, exactly once:
// ready or failed, as one JSON line on the readiness descriptor (fd 3 when
// started by the plugin's prolog; see ReadinessFD). Not inspect.Report (the
// analysis of a run).
type Readiness struct {
	// Status is StatusReady or StatusFailed.
	Status string `json:"status"`
	// Error is the reason when failed: it names the key or path at fault
	// and ends with the last lines of collector.log when there are any.
	Error string `json:"error,omitempty"`
	// Ports are the collector's loopback ports when ready.
	Ports jobdir.Ports `json:"ports"`
	// ReceiverToken is the per-job bearer token the OTLP receivers require;
	// tasks get it as OTEL_EXPORTER_OTLP_HEADERS. Not the backend token.
	ReceiverToken string `json:"receiver_token,omitempty"`
	// SupervisorPID is the supervisor's own pid.
	SupervisorPID int `json:"supervisor_pid"`
	// CollectorPID is the collector's pid when ready.
	CollectorPID int `json:"collector_pid,omitempty"`
	// CollectorStart is the collector's start time in clock ticks since
	// boot (field 22 of /proc/<pid>/stat), to re-check the pid later.
	CollectorStart uint64 `json:"collector_start,omitempty"`
	// OutputDir is the directory of the jsonl files.
	OutputDir string `json:"output_dir"`
	// ReadyMillis is the time from the supervisor's start to ready, in ms.
	ReadyMillis int64 `json:"ready_ms,omitempty"`
	// Hold is whether the supervisor serves the hold socket on the
	// listener handed to it at HoldListenerFD (helper/supervise's holdsock.go): the prolog
	// names the socket in root's record only then.
	Hold bool `json:"hold,omitempty"`
	// Steps are the start-up's steps and their durations, "name ms, ...",
	// for the prolog's log line (informational only).
	Steps string `json:"steps,omitempty"`
}

// ReadinessFD is the descriptor the plugin's prolog passes the supervisor
// for its Readiness line (the write end of a pipe, given as the first extra
// file; the hold socket's listener follows at HoldListenerFD).
const ReadinessFD = 3

// HoldListenerFD is the descriptor on which the plugin's prolog hands the
// supervisor its hold socket's listener (the second extra file, after the
// readiness pipe at ReadinessFD).
const HoldListenerFD = ReadinessFD + 1

// The environment of `gym-otel-spank supervise --from-env`, which the
// plugin's prolog sets (besides otel.token_env, SLURM_CONF, PATH, HOME, USER
// and LOGNAME): the supervisor's launch contract, one source for both sides.
const (
	EnvEncoded = "GYM_OTEL_SPEC"   // the encoded settings (config.Resolved.Encode)
	EnvFacts   = "GYM_OTEL_FACTS"  // JSON of jobfacts.Facts
	EnvRecord  = "GYM_OTEL_RECORD" // root's record of the job on this node; gone = the job ended
	// EnvPrologStart is the supervisor's environment variable with the
	// prolog's start (unix ms), set by the plugin's prolog (ParsePrologStart).
	EnvPrologStart = contract.EnvPrologStart
	// EnvEpilogStart is the job epilog's variable with its start (unix ms).
	EnvEpilogStart = contract.EnvEpilogStart
	// EnvSpawned is the instant (unix microseconds, SpawnedNow) the
	// plugin's prolog began to start the supervisor: the supervisor's first
	// step, "spawn", is from then to its own start (the fork into the
	// group, the exec, Go's start-up, the options). Only for the steps'
	// times: a value that is missing, in the future or over 10 s old is
	// ignored.
	EnvSpawned = "GYM_OTEL_SPAWNED_US"
)

// WriteReadiness writes r as one JSON line.
func WriteReadiness(w io.Writer, r Readiness) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ReadReadiness reads the one JSON line a supervisor wrote. An empty stream
// (the supervisor died before reporting) is an error.
func ReadReadiness(data []byte) (Readiness, error) {
	var r Readiness
	if len(data) == 0 {
		return r, fmt.Errorf("the supervisor exited without a report")
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("the supervisor's report is not JSON: %w", err)
	}
	if r.Status != StatusReady && r.Status != StatusFailed {
		return r, fmt.Errorf("the supervisor's report has status %q", r.Status)
	}
	return r, nil
}

// SpawnedNow is EnvSpawned's value for the present instant.
func SpawnedNow() string { return strconv.FormatInt(time.Now().UnixMicro(), 10) }

// ParsePrologStart reads EnvPrologStart's value (unix ms); zero when empty
// or not a plausible time.
func ParsePrologStart(v string) time.Time {
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
