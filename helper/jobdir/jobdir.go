// Package jobdir is the layout of a job's telemetry files and the format of
// state.json: where each node's collector writes (<job dir>/otel on the
// job's first node, otel/nodes/<node> on the others, otel/links/<job id>
// for a later link of a chain), the names of the files of such a node dir,
// and State, which the supervisor writes (WriteState) and inspect, replay
// and a nested submit read (ReadState). receipt.json has its own package
// (helper/receipt). jobdir imports only helper/atomicfile (a leaf, its
// writer of whole files) and helper/gpudev (the job's GPUs as State
// records them) of the project: every package that writes or reads a
// job's files can import it.
package jobdir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/gym-otel-spank/gym-otel-spank/helper/atomicfile"
	"github.com/gym-otel-spank/gym-otel-spank/helper/gpudev"
)

// The dirs of the layout, relative to a job dir.
const (
	// Otel is the job's telemetry dir in its job dir: the first node's
	// collector writes its files there.
	Otel = "otel"
	// Nodes holds the dir of every other node: otel/nodes/<node>.
	Nodes = "nodes"
	// Links holds a dir per later link of a chain (a job submitted from
	// inside the job, sharing its job dir): otel/links/<job id>, with its
	// own nodes/.
	Links = "links"
)

// The files of a node dir besides the jsonl files (SignalFile) and
// receipt.json (receipt.FileName).
const (
	// StateFile is the supervisor's state (State).
	StateFile = "state.json"
	// ConfigFile is the collector's configuration, rendered by the
	// supervisor; the collector runs with --config <node dir>/collector.yaml.
	ConfigFile = "collector.yaml"
	// LogFile is the collector's stdout and stderr, and the supervisor's
	// marks between runs.
	LogFile = "collector.log"
	// SupervisorLogFile is the supervisor's own log when it is asked to
	// keep one beside the files.
	SupervisorLogFile = "supervisor.log"
	// KeptStateFile and KeptConfigFile are what StateFile and ConfigFile
	// of an earlier run of the job are renamed to before a later run
	// writes the same node dir (a fmt format: %s is "<job id>.<restart
	// count>" of that run).
	KeptStateFile  = "state.%s.json"
	KeptConfigFile = "collector.%s.yaml"
	// TokenSocket is the supervisor's token socket in a node dir: a
	// Unix stream socket, mode 0600 (the job's user only), that answers
	// the line TokenRequest with the job's backend token and a newline,
	// for a nested submit inside the job (Gym's auto-resume), whose
	// environment the job's steps took the token out of.
	TokenSocket = ".token.sock"
	// TokenRequest is the one line TokenSocket answers.
	TokenRequest = "backend-token\n"
)

// SignalFile is the name of a signal's file in a node dir: "<signal>.jsonl"
// (signal "traces", "metrics" or "logs"), one OTLP-JSON object a line.
func SignalFile(signal string) string { return signal + ".jsonl" }

// OutputDir is the node dir of one node's collector: <jobDir>/otel on the
// job's first node (nodeIndex 0), <jobDir>/otel/nodes/<node> on every other
// node; under <jobDir>/otel/links/<link> instead when link (a job id) is
// not "" (a later link of a chain). jobDir is the expanded job dir; link
// and node are taken by their last path element only.
func OutputDir(jobDir, link string, nodeIndex int, node string) string {
	dir := filepath.Join(jobDir, Otel)
	if link != "" {
		dir = filepath.Join(dir, Links, filepath.Base(link))
	}
	if nodeIndex != 0 {
		dir = filepath.Join(dir, Nodes, filepath.Base(node))
	}
	return dir
}

// OtelDir is dir's otel/ when dir is a job dir that has one, else dir
// itself (taken to be an otel/ dir).
func OtelDir(dir string) string {
	if st, err := os.Stat(filepath.Join(dir, Otel)); err == nil && st.IsDir() {
		return filepath.Join(dir, Otel)
	}
	return dir
}

// NodeDir is one node dir of a job.
type NodeDir struct {
	// Path is the directory.
	Path string
	// Node is the node the directory is named for (nodes/<node>); "" for
	// the first node's dir, whose node comes from the host.name its
	// resources carry.
	Node string
	// Link is the job id of the chain link (links/<job id>); "" for the
	// job itself.
	Link string
}

// NodeDirs returns the node dirs of the job whose otel/ dir is otel: otel
// itself, each nodes/<node>/ of it, then each later link of the chain
// (links/<job id>/) followed by its nodes/<node>/, each list sorted by
// name. follow (nil: every one) decides for each links/ and nodes/ entry
// whether it is taken; those it refuses are returned in skipped, the
// links first (a link refused is not looked into). Entries that are not directories (symbolic
// links followed) are left out.
func NodeDirs(otel string, follow func(path string) bool) (dirs []NodeDir, skipped []string) {
	take := func(ps []string) []string {
		var in []string
		for _, p := range ps {
			if follow == nil || follow(p) {
				in = append(in, p)
			} else {
				skipped = append(skipped, p)
			}
		}
		return in
	}
	add := func(d, link string) {
		dirs = append(dirs, NodeDir{Path: d, Link: link})
		for _, n := range take(subdirs(filepath.Join(d, Nodes))) {
			dirs = append(dirs, NodeDir{Path: n, Node: filepath.Base(n), Link: link})
		}
	}
	links := take(subdirs(filepath.Join(otel, Links)))
	add(otel, "")
	for _, l := range links {
		add(l, filepath.Base(l))
	}
	return dirs, skipped
}

// subdirs returns the directories in dir, sorted.
func subdirs(dir string) []string {
	m, _ := filepath.Glob(filepath.Join(dir, "*"))
	sort.Strings(m)
	var out []string
	for _, p := range m {
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			out = append(out, p)
		}
	}
	return out
}

// Status values of State (and of the supervisor's report, which says
// StatusReady or StatusFailed).
const (
	StatusStarting = "starting"
	StatusReady    = "ready"
	StatusFailed   = "failed"
	StatusDraining = "draining"
	StatusDrained  = "drained"
)

// Ports are the loopback TCP ports of one collector.
type Ports struct {
	// OTLPGRPC and OTLPHTTP are the OTLP receivers' ports.
	OTLPGRPC int `json:"otlp_grpc"`
	// OTLPHTTP is the OTLP/HTTP receiver's port.
	OTLPHTTP int `json:"otlp_http"`
	// Health is the health_check extension's port.
	Health int `json:"health"`
	// Telemetry is the port of the collector's own metrics (Prometheus
	// text at /metrics); 0 turns them off.
	Telemetry int `json:"telemetry"`
	// Final is the supervisor's own loopback port that receives the
	// collector's own metrics once more when the collector shuts down
	// (OTLP/HTTP protobuf at /v1/metrics, bearer ${env:<render.PluginTokenEnv>}):
	// the final figures of the receipt, flushed after every pipeline has
	// shut down. 0 (or Telemetry 0) renders no such reader.
	Final int `json:"final,omitempty"`
	// Plugin is the port of the collector's OTLP/HTTP receiver of the
	// supervisor's own telling (the job's Slurm phase spans and its
	// readings of the node: cgroups, host energy and power), behind a
	// bearer token only the supervisor and the collector are given (never in
	// the task environment); 0 renders no such receiver.
	Plugin int `json:"plugin,omitempty"`
}

// Loopback returns every nonzero port of p, the collector's and the
// supervisor's loopback TCP ports of one job on one node, in field order:
// the set a node's packet filter keeps to the job's own processes. A port
// field added to Ports must be added here.
func (p Ports) Loopback() []int {
	var out []int
	for _, n := range []int{p.OTLPGRPC, p.OTLPHTTP, p.Health, p.Telemetry, p.Final, p.Plugin} {
		if n != 0 {
			out = append(out, n)
		}
	}
	return out
}

// State is state.json in a node dir: the supervisor's state, for humans,
// tests, inspect, replay and a nested submit (which finds the running
// collector through CollectorPID and checks it). It is the user's file;
// root never trusts it.
type State struct {
	// Status is one of the Status values.
	Status string `json:"status"`
	// Error is the reason of StatusFailed (or of a failed drain).
	Error string `json:"error,omitempty"`
	// Ports are the collector's loopback ports.
	Ports Ports `json:"ports"`
	// SupervisorPID is the supervisor's pid; CollectorPID the running
	// collector's (0 when none runs).
	SupervisorPID int `json:"supervisor_pid"`
	CollectorPID  int `json:"collector_pid,omitempty"`
	// Restarts counts the collector's restarts within the run.
	Restarts int `json:"restarts"`
	// ExportProblems says what collector.log showed of the backend's
	// trouble ("" none).
	ExportProblems string `json:"export_problems,omitempty"`
	// ForeignTargets are the scrape targets of the job's model services
	// that were seen served by another uid than the job's user: their
	// series in this run are not the job's (oldest first, at most
	// MaxForeignTargets).
	ForeignTargets []ForeignTarget `json:"foreign_targets,omitempty"`
	// UpdatedAt is when the state was written (RFC 3339, UTC, ns).
	UpdatedAt string `json:"updated_at"`
	// JobID, RestartCount and SLUID name the run of the job this state is
	// of (jobfacts.Facts; Restarts above counts collector restarts within
	// the run). A later run writing the same node dir first renames this
	// run's state.json and collector.yaml (KeptStateFile, KeptConfigFile).
	JobID        string `json:"job_id,omitempty"`
	RestartCount string `json:"restart_count,omitempty"`
	SLUID        string `json:"sluid,omitempty"`
	// GPUs are the job's GPUs on this node named by device (minor number,
	// PCI bus id as dcgm-exporter's pci_bus_id), as the supervisor read
	// them from the NVIDIA driver at start; empty when it could not
	// (jobfacts.Facts.GPUPCI).
	GPUs []gpudev.Device `json:"gpus,omitempty"`
}

// MaxForeignTargets bounds State.ForeignTargets.
const MaxForeignTargets = 32

// ForeignTarget is a scrape target whose port was listened on by a socket
// of another uid than the job's user.
type ForeignTarget struct {
	// Job is the scrape job (<component>/<service>); Port its loopback port.
	Job  string `json:"job"`
	Port int    `json:"port"`
	// UID owns the listening socket.
	UID uint32 `json:"uid"`
	// First and Last are when the supervisor saw it so (RFC 3339, UTC).
	First string `json:"first"`
	Last  string `json:"last"`
}

// ErrFormat is in the error of ReadState (errors.Is) when state.json is
// there but is not a State.
var ErrFormat = errors.New("not a state.json")

// ReadState reads dir/state.json. Errors: the file system's as os.ReadFile
// gives it (os.IsNotExist: the supervisor has not written one), or one
// wrapping ErrFormat, naming the file, when it is not a State; then the
// State holds what could be read of it.
func ReadState(dir string) (State, error) {
	var st State
	path := filepath.Join(dir, StateFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%s: %w: %v", path, ErrFormat, err)
	}
	return st, nil
}

// WriteState writes st as dir/state.json (indented JSON and a newline,
// mode 0600) through WriteFile. Errors: the file system's.
func WriteState(dir string, st State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, StateFile), append(b, '\n'), 0o600)
}
