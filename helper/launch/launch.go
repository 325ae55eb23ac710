// Package launch is the launch contract between root's side of the plugin
// (the job prolog and epilog in the plugin's Go core, helper/callbacks) and
// the job's supervisor (helper/supervise, `gym-otel-spank supervise
// --from-env`): the supervisor's environment, what root chooses before the
// supervisor starts and hands down (the job's ports, ChoosePorts; the
// receiver token, MintToken), the descriptors the prolog hands it, the one
// readiness line it answers with (no secret travels up), root's proof of
// the ports it reports, and root's own client of the control socket (the
// epilog's start). Both sides import it from here, so that the plugin's core links
// none of the supervisor (its servers, the collector's configuration, the
// OTLP encoders) to start one.
package launch

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
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
	// Ports are the job's loopback ports in use when ready: root's choice
	// (EnvPorts).
	// Root checks them against its choice and proves them
	// (ListenersIn). The line carries no secret: the receiver token is
	// root's (EnvReceiverToken), handed down.
	Ports jobdir.Ports `json:"ports"`
	// PortTaken, when failed, says that one of root's ports was bound by
	// another socket before the collector or the supervisor bound it:
	// the prolog may choose new ports and start again.
	PortTaken bool `json:"port_taken,omitempty"`
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
	// Control is whether the supervisor serves the control socket on the
	// listener handed to it at ControlListenerFD (helper/supervise's
	// controlsock.go): the prolog names the socket in root's record only
	// then. Its key stays "hold" (the socket's first name), so that a
	// prolog and a supervisor of releases on either side of the rename
	// read each other.
	Control bool `json:"hold,omitempty"`
	// Steps are the start-up's steps and their durations, "name ms, ...",
	// for the prolog's log line (informational only).
	Steps string `json:"steps,omitempty"`
}

// ReadinessFD is the descriptor the plugin's prolog passes the supervisor
// for its Readiness line (the write end of a pipe, given as the first extra
// file; the control socket's listener follows at ControlListenerFD).
const ReadinessFD = 3

// ControlListenerFD is the descriptor on which the plugin's prolog hands the
// supervisor its control socket's listener (the second extra file, after the
// readiness pipe at ReadinessFD).
const ControlListenerFD = ReadinessFD + 1

// The environment of `gym-otel-spank supervise --from-env`, which the
// plugin's prolog sets (besides otel.token_env, SLURM_CONF, PATH, HOME, USER
// and LOGNAME): the supervisor's launch contract, one source for both sides.
const (
	EnvEncoded = "GYM_OTEL_SPEC"   // the encoded settings (config.Resolved.Encode)
	EnvFacts   = "GYM_OTEL_FACTS"  // JSON of jobfacts.Facts
	EnvRecord  = "GYM_OTEL_RECORD" // root's record of the job on this node; gone = the job ended
	// EnvNvidiaProc is the NVIDIA driver's proc directory the supervisor
	// names the job's GPUs from (default /proc/driver/nvidia): set only by
	// the tests' build of the core (tag gymotel_nvidia_test), or by a test
	// that starts the supervisor itself.
	EnvNvidiaProc = "GYM_OTEL_NVIDIA_PROC"
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
	// EnvGateFD names the descriptor (decimal) of the supervisor's gate:
	// the read end of a pipe whose write end the plugin's prolog holds
	// while it installs the node's packet filter for the job's ports, so
	// that the filter goes in while the supervisor starts rather than
	// before it. The supervisor binds none of root's ports and starts no
	// collector until it reads GateOpen there; end of file without it
	// (root could not install the rules it requires) ends its start.
	// Unset (a prolog of an earlier release, a supervisor started by
	// hand): no gate.
	EnvGateFD = "GYM_OTEL_GATE_FD"
	// EnvEarlyCollector is the supervisor's environment variable naming
	// the host collector (an absolute path) that its process execs at its
	// very start, before its Go runtime (the collector's early exec:
	// cmd/gym-otel-spank/early.c), so that the collector's own
	// initialisation overlaps the supervisor's start. That collector waits
	// in its init for the hand-over (EnvHandover) and takes nothing before
	// it. Set by the plugin's prolog for a host collector named
	// EarlyCollectorName; unset: the collector is exec'd when the
	// supervisor starts it, as for every later run.
	EnvEarlyCollector = "GYM_OTEL_EARLY_COLLECTOR"
	// EnvHandover is the early collector's one environment variable before
	// its hand-over: the descriptor of its end of the hand-over socket
	// (a SOCK_SEQPACKET pair with the supervisor). The collector's own
	// init (collector/handover.go) receives one message there: its whole
	// environment, its resource limits and umask, and its log and held
	// output dir as descriptors; it answers HandoverAck once it took them,
	// and exits 0 at an end of file without one.
	EnvHandover = "GYM_OTEL_HANDOVER_FD"
)

// EarlyCollectorName is the file name of the host collector the
// prolog has exec'd early (EnvEarlyCollector): the product's collector,
// whose init takes the hand-over. Another binary (a site's own build of
// the upstream collector, a test's stand-in) is exec'd only when the
// supervisor starts it.
const EarlyCollectorName = "otelcol-gym"

// HandoverAck is the byte the early collector answers the hand-over
// with once its descriptors, environment and limits are in place.
const HandoverAck = 'h'

// GateOpen is the one byte root writes on the supervisor's gate
// (EnvGateFD) once the job's packet filter is in place, or not needed.
const GateOpen = 'g'

// FormatGateFD is EnvGateFD's value for descriptor fd.
func FormatGateFD(fd int) string { return strconv.Itoa(fd) }

// ParseGateFD reads EnvGateFD's value: a descriptor above the standard
// three. Errors name the value.
func ParseGateFD(v string) (int, error) {
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return 0, fmt.Errorf("%s=%q is not a descriptor above 2", EnvGateFD, v)
	}
	return fd, nil
}

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

// Root's choices, handed down to the supervisor before it starts (the
// prolog sets both in its environment; neither ever travels up): the
// job's loopback ports and the receiver token.
const (
	// EnvPorts is the supervisor's environment variable with the job's
	// loopback ports as root chose them (FormatPorts): the collector's
	// OTLP gRPC, OTLP HTTP, health, telemetry and plugin receiver ports
	// and the supervisor's own final-figures and cgroup-page ports. The
	// supervisor binds exactly these, at its first start and after every
	// restart, and never chooses others.
	EnvPorts = "GYM_OTEL_PORTS"
	// EnvReceiverToken is the supervisor's environment variable with the
	// receiver token root minted (MintToken): the bearer token the
	// collector's OTLP receivers require of the job's tasks. The
	// supervisor moves it into the collector's environment and unsets
	// it; root puts it in the tasks' environment through its record.
	EnvReceiverToken = "GYM_OTEL_RECEIVER_TOKEN"
)

// portFields are the ports of jobdir.Ports that EnvPorts carries, in its
// order.
func portFields(p *jobdir.Ports) []*int {
	return []*int{&p.OTLPGRPC, &p.OTLPHTTP, &p.Health, &p.Telemetry, &p.Plugin, &p.Final}
}

// ChoosePorts returns six distinct free TCP ports on 127.0.0.1 (FreePorts,
// passing over every port skip reports: nil, none) for every field of
// jobdir.Ports: root's choice for the job on this node. Errors: the
// kernel's, when it has no free port.
func ChoosePorts(skip func(port int) bool) (jobdir.Ports, error) {
	var p jobdir.Ports
	fields := portFields(&p)
	free, err := FreePorts(len(fields), skip)
	if err != nil {
		return p, err
	}
	for i, f := range fields {
		*f = free[i]
	}
	return p, nil
}

// FormatPorts is EnvPorts' value for p: its ports comma-separated, in the
// order OTLP gRPC, OTLP HTTP, health, telemetry, plugin, final, cgroup.
func FormatPorts(p jobdir.Ports) string {
	fields := portFields(&p)
	parts := make([]string, len(fields))
	for i, f := range fields {
		parts[i] = strconv.Itoa(*f)
	}
	return strings.Join(parts, ",")
}

// ParsePorts reads EnvPorts' value (FormatPorts). Errors name the variable
// and the value: not seven ports in 1..65535, or a port twice.
func ParsePorts(v string) (jobdir.Ports, error) {
	var p jobdir.Ports
	fields := portFields(&p)
	parts := strings.Split(v, ",")
	if len(parts) != len(fields) {
		return p, fmt.Errorf("%s=%q: want %d comma-separated ports", EnvPorts, v, len(fields))
	}
	seen := map[int]bool{}
	for i, s := range parts {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 65535 || seen[n] {
			return jobdir.Ports{}, fmt.Errorf("%s=%q: %q is not a distinct port in 1..65535", EnvPorts, v, s)
		}
		seen[n] = true
		*fields[i] = n
	}
	return p, nil
}

// MintToken returns a new receiver token: "gos_" and 48 hex digits of 24
// bytes from crypto/rand. Errors: the kernel's random source.
func MintToken() (string, error) {
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return "", fmt.Errorf("minting the receiver token: %w", err)
	}
	return "gos_" + hex.EncodeToString(tok), nil
}
