package record

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"

	"github.com/gym-otel-spank/gym-otel-spank/helper/atomicfile"
	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
)

// Record is root's record of one job on one node: written by the prolog
// (as root, 0600, in a root-only directory), read by every step (pure C,
// spank/record.c) and by the epilog. It never holds the backend token.
//
// The file is lines of key=value; env and unset repeat:
//
//	status=starting|ready|failed
//	on_failure=continue|fail
//	reason=<one line>
//	final_wait=<seconds the batch step's task_exit waits, 0..30>
//	drain_timeout=<seconds the epilog waits for the supervisor>
//	supervisor_pid=<pid>
//	supervisor_start=<start time, clock ticks since boot>
//	uid=<the job's uid>
//	cgroup=<the collector's cgroup below each hierarchy, "" for none>
//	cgroup_memory=<the file of its memory bound, which steps lower to the job's memory>
//	cgroup_cpuset=<the file of its CPU set, which steps narrow to their CPUs>
//	hold_socket=<the path of the supervisor's control socket (ControlSocketPath), "" for none>
//	filter_ports=<the job's loopback ports the node's packet filter keeps to the job, comma-separated, "" for none>
//	filter_cluster=<the cluster whose name the packet filter's chains hold (SLURM_CLUSTER_NAME), percent-encoded; written with filter ports>
//	output_dir=<the node's collector dir, as its supervisor reported it, "" when not ready or not one line>
//	backend=<the OTLP/HTTP base URL the collector ships to (Backend: no credentials), "" when not ready>
//	env=KEY=VALUE
//	unset=NAME
//	resattr=key=<percent-encoded value>
type Record struct {
	Status          string
	OnFailure       string
	Reason          string
	FinalWait       int
	DrainTimeout    int
	SupervisorPID   int
	SupervisorStart uint64
	UID             uint32
	// Cgroup is the collector's cgroup below each hierarchy's mount
	// (cgroup.JobPath: gym_otel/<cluster>/<node>/job_<id>), "" on a node without one.
	Cgroup string
	// CgroupMemory is the absolute path of that group's memory bound
	// (memory.limit_in_bytes or memory.max), "" when none.
	CgroupMemory string
	// CgroupCpuset is the absolute path of that group's cpuset.cpus, ""
	// when none.
	CgroupCpuset string
	// ControlSocket is the path of the supervisor's control socket
	// (ControlSocketPath: root's listener, made by the prolog in a root-only
	// dir), on which the steps and the epilog talk to the supervisor; ""
	// when the supervisor serves none.
	ControlSocket string
	// FilterPorts are the job's loopback ports for which the prolog
	// installed the node's packet filter (helper/portfilter), which the
	// epilog removes; none when it installed nothing.
	FilterPorts []int
	// FilterCluster is the cluster name the prolog named the job's packet
	// filter chains by (portfilter.Job.Cluster: SLURM_CLUSTER_NAME), which
	// the epilog names them by in turn.
	FilterCluster string
	// FilterLegacy is set by Parse when the record has filter ports and no
	// filter_cluster line: a prolog before the chains held the cluster's
	// name wrote it, and the epilog removes the chains by their legacy
	// names (portfilter.Job.Legacy). Marshal writes no line of it.
	FilterLegacy bool
	// OutputDir is the node's collector dir (<job dir>/otel on the job's
	// first node), as the supervisor reported it once ready; "" otherwise.
	// The batch step names it in the job's output.
	OutputDir string
	// Backend is the OTLP/HTTP base URL the collector exports to, as
	// Backend makes it (scheme, host, port and path only); "" otherwise.
	// The batch step names it in the job's output.
	Backend string
	Env     []KV
	Unset   []string
	// ResAttrs are the resource attributes every task's
	// OTEL_RESOURCE_ATTRIBUTES gets where their key is not there yet
	// (spank/taskenv.c): the job's identity as the collector stamps it,
	// values percent-encoded as that variable carries them
	// (taskenv.ResourceAttrs).
	ResAttrs []KV
}

// The values of Record.Status.
const (
	// StatusStarting: the prolog has chosen the ports, minted the
	// receiver token and started the supervisor, whose report it awaits;
	// the steps read it as not ready (spank/record.c), the epilog ends
	// the group and removes the rules it names.
	StatusStarting = "starting"
	// StatusReady: the collector is healthy on the record's ports.
	StatusReady = "ready"
	// StatusFailed: no collector; Reason says why.
	StatusFailed = "failed"
)

// KV is one environment variable.
type KV struct{ Key, Value string }

// MaxReasonBytes bounds a failure reason in root's record and log lines.
const MaxReasonBytes = 1000

// UserText makes text that may come from the user (a collector's log, a
// report) safe for root's record and Slurm's logs: every control character
// (newlines, escapes) becomes a space, invalid UTF-8 is replaced, and the
// result is cut to at most max bytes, saying how much was cut.
func UserText(s string, max int) string {
	s = strings.ToValidUTF8(s, "?")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= max {
		return s
	}
	cut := max - 24
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s ... (%d bytes cut)", s[:cut], len(s)-cut)
}

// oneLine flattens s into one line (records and logs are line formats).
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == 0 {
			return ' '
		}
		return r
	}, s)
	return strings.TrimSpace(s)
}

// Marshal returns the record's text. Env values and names with a newline
// or NUL are refused.
func (r *Record) Marshal() ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s=%s\n", contract.RecordStatus, r.Status)
	fmt.Fprintf(&b, "%s=%s\n", contract.RecordOnFailure, r.OnFailure)
	fmt.Fprintf(&b, "%s=%s\n", contract.RecordReason, oneLine(r.Reason))
	fmt.Fprintf(&b, "%s=%d\n", contract.RecordFinalWait, r.FinalWait)
	fmt.Fprintf(&b, "drain_timeout=%d\n", r.DrainTimeout)
	fmt.Fprintf(&b, "%s=%d\n", contract.RecordSupervisorPID, r.SupervisorPID)
	fmt.Fprintf(&b, "%s=%d\n", contract.RecordSupervisorStart, r.SupervisorStart)
	fmt.Fprintf(&b, "uid=%d\n", r.UID)
	fmt.Fprintf(&b, "cgroup=%s\n", oneLine(r.Cgroup))
	fmt.Fprintf(&b, "%s=%s\n", contract.RecordCgroupMemory, oneLine(r.CgroupMemory))
	fmt.Fprintf(&b, "%s=%s\n", contract.RecordCgroupCpuset, oneLine(r.CgroupCpuset))
	fmt.Fprintf(&b, "%s=%s\n", contract.RecordControlSocket, oneLine(r.ControlSocket))
	ports := make([]string, len(r.FilterPorts))
	for i, p := range r.FilterPorts {
		ports[i] = strconv.Itoa(p)
	}
	fmt.Fprintf(&b, "filter_ports=%s\n", strings.Join(ports, ","))
	if len(r.FilterPorts) > 0 && !r.FilterLegacy {
		fmt.Fprintf(&b, "filter_cluster=%s\n", url.QueryEscape(r.FilterCluster))
	}
	// A dir whose name holds a control character is not named at all
	// (the job's output says nothing then): it cannot be one line.
	outDir := r.OutputDir
	if hasControl(outDir) {
		outDir = ""
	}
	fmt.Fprintf(&b, "%s=%s\n", contract.RecordOutputDir, outDir)
	fmt.Fprintf(&b, "%s=%s\n", contract.RecordBackend, Backend(r.Backend))
	for _, kv := range r.Env {
		if !EnvName(kv.Key) || strings.ContainsAny(kv.Value, "\n\r\x00") {
			return nil, fmt.Errorf("record: env %q: not a name or a one-line value", kv.Key)
		}
		fmt.Fprintf(&b, "%s=%s=%s\n", contract.RecordEnv, kv.Key, kv.Value)
	}
	for _, n := range r.Unset {
		if !EnvName(n) {
			return nil, fmt.Errorf("record: unset %q: not a variable name", n)
		}
		fmt.Fprintf(&b, "%s=%s\n", contract.RecordUnset, n)
	}
	for _, kv := range r.ResAttrs {
		if kv.Key == "" || strings.ContainsAny(kv.Key, ",= \t\n\r\x00%") || strings.ContainsAny(kv.Value, ",= \t\n\r\x00") {
			return nil, fmt.Errorf("record: resattr %q: not a key or not a percent-encoded value", kv.Key)
		}
		fmt.Fprintf(&b, "%s=%s=%s\n", contract.RecordResAttr, kv.Key, kv.Value)
	}
	return b.Bytes(), nil
}

// Parse parses a record's text.
func Parse(data []byte) (*Record, error) {
	r := &Record{}
	filterCluster := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		var err error
		switch k {
		case contract.RecordStatus:
			r.Status = v
		case contract.RecordOnFailure:
			r.OnFailure = v
		case contract.RecordReason:
			r.Reason = v
		case contract.RecordFinalWait:
			r.FinalWait, err = strconv.Atoi(v)
		case "drain_timeout":
			r.DrainTimeout, err = strconv.Atoi(v)
		case contract.RecordSupervisorPID:
			r.SupervisorPID, err = strconv.Atoi(v)
		case contract.RecordSupervisorStart:
			r.SupervisorStart, err = strconv.ParseUint(v, 10, 64)
		case "uid":
			var u uint64
			u, err = strconv.ParseUint(v, 10, 32)
			r.UID = uint32(u)
		case "cgroup":
			r.Cgroup = v
		case contract.RecordCgroupMemory:
			r.CgroupMemory = v
		case contract.RecordCgroupCpuset:
			r.CgroupCpuset = v
		case contract.RecordControlSocket:
			r.ControlSocket = v
		case "filter_ports":
			for _, f := range strings.Split(v, ",") {
				if f == "" {
					continue
				}
				var n int
				if n, err = strconv.Atoi(f); err != nil {
					break
				}
				r.FilterPorts = append(r.FilterPorts, n)
			}
		case "filter_cluster":
			r.FilterCluster, err = url.QueryUnescape(v)
			filterCluster = true
		case contract.RecordOutputDir:
			r.OutputDir = v
		case contract.RecordBackend:
			r.Backend = v
		case contract.RecordEnv:
			ek, ev, _ := strings.Cut(v, "=")
			r.Env = append(r.Env, KV{ek, ev})
		case contract.RecordUnset:
			r.Unset = append(r.Unset, v)
		case contract.RecordResAttr:
			ak, av, _ := strings.Cut(v, "=")
			r.ResAttrs = append(r.ResAttrs, KV{ak, av})
		}
		if err != nil {
			return nil, fmt.Errorf("record: %s: %w", k, err)
		}
	}
	if r.Status != StatusReady && r.Status != StatusFailed && r.Status != StatusStarting {
		return nil, fmt.Errorf("record: status %q", r.Status)
	}
	r.FilterLegacy = len(r.FilterPorts) > 0 && !filterCluster
	return r, sc.Err()
}

// Backend is endpoint as the record keeps it and the job's output shows
// it: scheme://host[:port]/path of an http or https URL, with any user
// info, query and fragment dropped (otel.endpoint's validation refuses
// them already: this is the second guard that no credential reaches a
// job's output), control characters refused. "" when endpoint is not
// such a URL.
func Backend(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || hasControl(endpoint) {
		return ""
	}
	clean := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	return clean.String()
}

// hasControl reports whether s holds a control character (a record line
// and a line of the job's output must stay one line).
func hasControl(s string) bool {
	return strings.IndexFunc(s, unicode.IsControl) >= 0
}

// EnvName reports whether s is a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*).
func EnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// JobDir is <recordDir>/<node>/<jobID>.
func JobDir(recordDir, node string, jobID uint32) string {
	return filepath.Join(recordDir, node, strconv.FormatUint(uint64(jobID), 10))
}

// ensureRootDir makes dir (mode) when missing and checks that it is a real
// directory owned by root that only root can write (no symlink).
func ensureRootDir(dir string, mode os.FileMode) error {
	if err := os.Mkdir(dir, mode); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return CheckRootDir(dir)
}

// CheckRootDir returns an error unless dir is a real directory (not a
// symlink) owned by root and not writable by group or others.
func CheckRootDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSymlink != 0 || !fi.IsDir() {
		return fmt.Errorf("%s: not a directory (a symlink?)", dir)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid != 0 {
		return fmt.Errorf("%s: not owned by root", dir)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s: writable by group or others", dir)
	}
	return nil
}

// MakeJobDir creates <recordDir>, <recordDir>/<node> and the job's
// dir, all root's and 0711, refusing symlinks and foreign owners. They can
// be searched but not listed by others: the supervisor (the job's user) can
// stat its record (0600) to notice the job's end, but neither read it nor
// list which jobs a node runs.
func MakeJobDir(recordDir, node string, jobID uint32) (string, error) {
	if node == "" || strings.ContainsAny(node, "/\x00") || node == "." || node == ".." {
		return "", fmt.Errorf("node name %q is not usable as a directory name", node)
	}
	dir := JobDir(recordDir, node, jobID)
	for _, d := range []string{recordDir, filepath.Join(recordDir, node), dir} {
		if err := ensureRootDir(d, 0o711); err != nil {
			return "", fmt.Errorf("record dir: %w", err)
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// ControlDir is the job record dir's subdirectory that holds the control
// socket: root's, mode 0700, so that only root can connect to the socket
// (the supervisor, the job's user, serves it on the listener the prolog
// hands it; it never sees the path). Its name stays "hold" (the socket's
// first name): the path is in the records of jobs running across an
// upgrade.
const ControlDir = "hold"

// ControlSocketFile is the control socket's name in ControlDir.
const ControlSocketFile = "sock"

// ControlSocketPath is the control socket's path in job record dir jobDir
// (JobDir): <jobDir>/hold/sock.
func ControlSocketPath(jobDir string) string {
	return filepath.Join(jobDir, ControlDir, ControlSocketFile)
}

// MakeControlDir makes job record dir jobDir's ControlDir (root's, 0700; a
// symlink, another owner or a group or other write bit refused), removes
// a socket file an earlier run of the job left there (its node crashed,
// or its epilog never ran) and returns the path at which to bind the hold
// socket. Errors: the dir cannot be made or is not root's only, the path
// is longer than a unix socket's (contract.ControlPathMax: a shorter
// plugstack record_dir), a leftover that cannot be removed.
func MakeControlDir(jobDir string) (string, error) {
	path := ControlSocketPath(jobDir)
	if len(path) > contract.ControlPathMax {
		return "", fmt.Errorf("control socket %s: %d bytes, a unix socket's path has at most %d (plugstack record_dir: a shorter one)", path, len(path), contract.ControlPathMax)
	}
	dir := filepath.Dir(path)
	if err := ensureRootDir(dir, 0o700); err != nil {
		return "", fmt.Errorf("control socket dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return "", err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("control socket: the earlier run's %s: %w", path, err)
	}
	return path, nil
}

// Write writes r into dir atomically (a temporary file, fsync,
// rename), mode 0600.
func Write(dir string, r *Record) error {
	data, err := r.Marshal()
	if err != nil {
		return err
	}
	return atomicfile.WriteSynced(filepath.Join(dir, contract.RecordFile), data, 0o600)
}

// Read reads dir's record, checking it is root's and not writable by
// group or others.
func Read(dir string) (*Record, error) {
	if err := CheckRootDir(dir); err != nil {
		return nil, err
	}
	p := filepath.Join(dir, contract.RecordFile)
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a root-only regular file", p)
	}
	data := make([]byte, 0, fi.Size())
	buf := bytes.NewBuffer(data)
	if _, err := buf.ReadFrom(f); err != nil {
		return nil, err
	}
	return Parse(buf.Bytes())
}
