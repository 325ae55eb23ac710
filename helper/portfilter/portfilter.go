// Package portfilter keeps a job's loopback ports to the job on a shared
// node, in the kernel: nftables rules that root installs in the job
// prolog once the job's collector holds its ports, and removes in the
// epilog.
//
// Loopback is no boundary: any local user can connect to 127.0.0.1, and
// any local user can bind a port the job's collector freed (a restart
// after a crash or an OOM kill) and receive what the job's tasks go on
// sending there, the receiver token among it. The receivers' bearer check
// and the supervisor's own guards act only once a connection is accepted.
// Two rules per job close both halves before that:
//
//   - sending: in the output hook, a TCP packet to 127.0.0.1 on one of the
//     job's ports from a socket of another uid than the job's (or root's)
//     is answered with a TCP reset (meta skuid). Other users cannot
//     connect, and a connection made before the rules loses its next
//     packet.
//   - receiving: in the input hook, a connection request (a SYN) to
//     127.0.0.1 on one of the job's ports is let through only when the
//     listening socket belongs to the job's own cgroup v2 group, the
//     plugin's root-owned group that holds the supervisor and the
//     collector (socket cgroupv2); any other listener, a squatter's of any
//     uid, never completes a connection, and the job's tasks get a reset
//     as if nothing listened.
//
// The socket cgroupv2 match needs the unified (v2) hierarchy: a cgroup v2
// node, or a v1 node whose systemd mounts the unified hierarchy beside the
// controllers (/sys/fs/cgroup/unified, "hybrid"); nft names a group by its
// path below /sys/fs/cgroup. A node without it, or without nft, cannot
// keep the ports: the plugstack argument port_filter says what then
// happens (Mode).
//
// Everything lives in one table, inet gym_otel, of the node: two base
// chains (output and input, priority filter - 10) whose only rule sends a
// packet to the job's chain by a verdict map from the destination port,
// and two regular chains per job. The table's base chains only ever
// reset; a site's own firewall in other tables is untouched.
//
// The prolog and the epilog write the rules through the kernel's nftables
// netlink interface (AddJob, SetTable, RemoveJob: no program run on the
// start's path), and the prolog lists it there (HeldPorts, Orphans); the
// nft program writes the same rules from the scripts here where netlink
// refuses (Install, EnsureTable, Remove), and lists the table where
// netlink cannot (Orphans).
package portfilter

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Table is the nftables table (family inet) that holds every job's rules
// on a node.
const Table = "gym_otel"

// Priority is the base chains' priority (nft's "filter - 10"): before a
// site's filter chains at the usual priority 0; the order matters little,
// as these chains only ever reset or pass.
const Priority = "filter - 10"

// CgroupMount is where nft resolves a socket cgroupv2 path: the paths are
// relative to it (nftables' datatype.c, SYSFS_CGROUPSV2_PATH).
const CgroupMount = "/sys/fs/cgroup"

// Modes of the plugstack argument port_filter.
const (
	// ModeAuto filters where the node can, and elsewhere runs the
	// collector with a warning logged once per node and reason.
	ModeAuto = "auto"
	// ModeRequire refuses a collector on a node that cannot filter.
	ModeRequire = "require"
	// ModeOff installs nothing.
	ModeOff = "off"
)

// Timeout bounds one run of nft. It takes 10-150 ms on an idle node, but
// 0.6-1.7 s was measured on a node at a load of 15 per CPU and a 2 s bound
// killed every run at a load of 20, leaving the job unfiltered (port_filter
// auto) or refused (require); the prolog's own deadline still bounds the
// whole filter step.
const Timeout = 5 * time.Second

// Job is what the rules of one job on one node need.
type Job struct {
	// ID is the job id. A requeued job's next run on the node comes after
	// its epilog; were its rules left, the next run's replace them (the
	// chains are flushed, the stale map entries removed by Install).
	ID uint32
	// Cluster is the job's Slurm cluster (ClusterName, the prolog's
	// SLURM_CLUSTER_NAME): job ids are per cluster, and one host may run
	// nodes of several clusters under the same node name (test clusters),
	// whose rules share the node's one table, so the chains are named by
	// cluster too.
	Cluster string
	// Node is the Slurm node the rules are for: one host may run several
	// slurmd (a test cluster, a simulated one), each a node of the same
	// job with its own collector and group, so the chains are per node.
	Node string
	// Legacy names the chains the way prologs did before the cluster was
	// in the names (LegacyChain): the epilog of a job whose prolog ran
	// before an upgrade removes its rules by these names (its record has
	// no filter_cluster line, record.Record.FilterLegacy), and the sweep
	// of orphans reports such chains with Legacy set.
	Legacy bool
	// UID is the job's uid: its sockets may connect.
	UID uint32
	// Ports are the job's loopback TCP ports (jobdir.Ports.Loopback).
	Ports []int
	// Group is the job's cgroup v2 group as nft names it: its path
	// relative to CgroupMount, e.g. "unified/gym_otel/c/n/job_7" on a
	// hybrid node; Level is its depth in the v2 hierarchy (the v2
	// mount's root is level 0).
	Group string
	Level int
}

// maxClusterPart and maxNodePart bound the cluster's and the node's part of a chain name
// (bytes each, after keepName): the longest name, job_<10 digits>_<32>_
// <40>_<8 hex>_out, is 101 bytes, well within nft's 255 (the kernel's
// NFT_CHAIN_MAXNAMELEN, 256 with its NUL); the hash after them keeps apart
// two names cut to the same part.
const (
	maxClusterPart = 32
	maxNodePart    = 40
)

// keepName is s as a part of a chain name: letters and digits kept, every
// other byte "_" (nft's identifiers are letters, digits, "_", "." "/" and
// "-"; "_" alone keeps the parts apart unambiguously with the hash), at
// most max bytes.
func keepName(s string, max int) string {
	kept := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, s)
	if len(kept) > max {
		kept = kept[:max]
	}
	return kept
}

// Chain is the name of the job's chain on its node for hook ("out" or
// "in"): job_<id>_<cluster>_<node>_<hash>_<hook>, the cluster's name kept
// to 32 letters, digits and "_", the node's to 40, and <hash> the first 8
// hex digits of the SHA-256 of the cluster's and node's full names (NUL
// between), so that two clusters or nodes whose names differ only in other
// characters, or beyond the kept length, stay apart. A Legacy job's is
// LegacyChain's.
func (j Job) Chain(hook string) string {
	if j.Legacy {
		return j.LegacyChain(hook)
	}
	sum := sha256.Sum256([]byte(j.Cluster + "\x00" + j.Node))
	return fmt.Sprintf("job_%d_%s_%s_%x_%s", j.ID, keepName(j.Cluster, maxClusterPart), keepName(j.Node, maxNodePart), sum[:4], hook)
}

// LegacyChain is the name prologs gave the job's chain before the cluster
// was in the names: job_<id>_<node>_<hash>_<hook>, the node kept as in
// Chain and <hash> of the node's name alone. It never equals a Chain name
// of the same node: its hash is of another text.
func (j Job) LegacyChain(hook string) string {
	sum := sha256.Sum256([]byte(j.Node))
	return fmt.Sprintf("job_%d_%s_%x_%s", j.ID, keepName(j.Node, maxNodePart), sum[:4], hook)
}

// check refuses a job the rules cannot name safely: no port, a port out
// of range, a group path nft's string syntax cannot hold.
func (j Job) check() error {
	if len(j.Ports) == 0 {
		return errors.New("no port to keep")
	}
	for _, p := range j.Ports {
		if p < 1 || p > 65535 {
			return fmt.Errorf("port %d out of range", p)
		}
	}
	if j.Group == "" || j.Level < 1 {
		return fmt.Errorf("no cgroup v2 group (path %q, level %d)", j.Group, j.Level)
	}
	for _, c := range j.Group {
		if c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
			return fmt.Errorf("cgroup path %q: nft cannot name it", j.Group)
		}
	}
	return nil
}

// portList is "p1, p2, ..." for an nft set.
func portList(ports []int, each func(int) string) string {
	parts := make([]string, len(ports))
	for i, p := range ports {
		parts[i] = each(p)
	}
	return strings.Join(parts, ", ")
}

// tableScript makes the table, its two verdict maps and base chains when
// they are not there ("add" is idempotent) and sets each base chain's one
// rule (flushed and added in the same transaction, so that concurrent
// prologs leave one).
func tableScript() string {
	return fmt.Sprintf(`add table inet %[1]s
add map inet %[1]s out_ports { type inet_service : verdict; }
add map inet %[1]s in_ports { type inet_service : verdict; }
add chain inet %[1]s output { type filter hook output priority %[2]s; policy accept; }
add chain inet %[1]s input { type filter hook input priority %[2]s; policy accept; }
flush chain inet %[1]s output
flush chain inet %[1]s input
add rule inet %[1]s output ip daddr 127.0.0.1 tcp dport vmap @out_ports
add rule inet %[1]s input ip daddr 127.0.0.1 tcp flags & (syn | ack) == syn tcp dport vmap @in_ports
`, Table, Priority)
}

// AddScript is the nft script that installs j's rules: the table (when
// new, its base chains' rules set again), j's two chains and j's ports in
// the two maps, one transaction. Errors: j not nameable (check).
func AddScript(j Job) (string, error) {
	js, err := JobScript(j)
	if err != nil {
		return "", err
	}
	return tableScript() + js, nil
}

// JobScript is the nft script that installs j's rules in the node's table
// as it is: j's two chains and j's ports in the two maps, one transaction
// that fails where the table or its maps are not there. It leaves the
// base chains alone: setting their rules again, as AddScript does, makes
// the kernel's commit wait for its readers (15-20 ms measured on an idle
// node, against 5 ms for this script). Errors: j not nameable (check).
func JobScript(j Job) (string, error) {
	if err := j.check(); err != nil {
		return "", err
	}
	var b strings.Builder
	out, in := j.Chain("out"), j.Chain("in")
	fmt.Fprintf(&b, "add chain inet %s %s\n", Table, out)
	fmt.Fprintf(&b, "flush chain inet %s %s\n", Table, out)
	// Root may connect (an admin's check of a job's collector); no other
	// uid but the job's.
	fmt.Fprintf(&b, "add rule inet %s %s meta skuid { 0, %d } return\n", Table, out, j.UID)
	fmt.Fprintf(&b, "add rule inet %s %s reject with tcp reset\n", Table, out)
	fmt.Fprintf(&b, "add chain inet %s %s\n", Table, in)
	fmt.Fprintf(&b, "flush chain inet %s %s\n", Table, in)
	fmt.Fprintf(&b, "add rule inet %s %s socket cgroupv2 level %d %q return\n", Table, in, j.Level, j.Group)
	fmt.Fprintf(&b, "add rule inet %s %s reject with tcp reset\n", Table, in)
	fmt.Fprintf(&b, "add element inet %s out_ports { %s }\n", Table, portList(j.Ports, func(p int) string { return fmt.Sprintf("%d : jump %s", p, out) }))
	fmt.Fprintf(&b, "add element inet %s in_ports { %s }\n", Table, portList(j.Ports, func(p int) string { return fmt.Sprintf("%d : jump %s", p, in) }))
	return b.String(), nil
}

// removeStatements are the statements that remove j's rules: its ports
// from the maps first (a chain a map still jumps to cannot be deleted),
// then its chains.
func removeStatements(j Job) []string {
	var out []string
	for _, p := range j.Ports {
		out = append(out, fmt.Sprintf("delete element inet %s out_ports { %d }", Table, p))
		out = append(out, fmt.Sprintf("delete element inet %s in_ports { %d }", Table, p))
	}
	for _, h := range []string{"out", "in"} {
		out = append(out, fmt.Sprintf("flush chain inet %s %s", Table, j.Chain(h)))
		out = append(out, fmt.Sprintf("delete chain inet %s %s", Table, j.Chain(h)))
	}
	return out
}

// Runner runs nft with a script on its standard input ("-f -"); tests
// put another in.
type Runner func(ctx context.Context, script string) error

// Nft is the nft program's path: the first of the usual places that
// exists ("" when none does).
func Nft() string {
	for _, p := range []string{"/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft", "/usr/local/sbin/nft"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// NftRunner runs the nft program at path, within Timeout, with an empty
// environment. Errors: nft's exit with its first line of standard error.
func NftRunner(path string) Runner {
	return func(ctx context.Context, script string) error {
		_, err := runNft(ctx, path, script, "-f", "-")
		return err
	}
}

// runNft runs the nft program at path with args and stdin on its standard
// input, within Timeout, with an empty environment, and returns its
// standard output. Errors: nft's exit with its first line of standard
// error (at most 300 bytes).
func runNft(ctx context.Context, path, stdin string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = []string{}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		if len(msg) > 300 {
			msg = msg[:300]
		}
		if msg != "" {
			return nil, fmt.Errorf("nft: %v: %s", err, msg)
		}
		return nil, fmt.Errorf("nft: %w", err)
	}
	return stdout.Bytes(), nil
}

// Install installs j's rules with run: into the node's table as it is
// (JobScript), else with the table made or set again (AddScript: the
// node's first job, a table someone removed). A port of j still in the
// maps (a job whose epilog could not remove its rules: the port is j's
// now, as its collector holds it) is removed and the install tried once
// more. The base chains' rules of a table that is there are not set
// again: EnsureTable does that, beside the job's start. Errors: the
// install's.
func Install(ctx context.Context, run Runner, j Job) error {
	js, err := JobScript(j)
	if err != nil {
		return err
	}
	if run(ctx, js) == nil {
		return nil
	}
	script, _ := AddScript(j) // j checked by JobScript
	err = run(ctx, script)
	if err == nil {
		return nil
	}
	for _, p := range j.Ports {
		for _, m := range []string{"out_ports", "in_ports"} {
			_ = run(ctx, fmt.Sprintf("delete element inet %s %s { %d }\n", Table, m, p))
		}
	}
	if err2 := run(ctx, script); err2 != nil {
		return fmt.Errorf("%w (and after removing stale entries of its ports: %v)", err, err2)
	}
	return nil
}

// EnsureTable makes the node's table with run when it is not there and
// sets its base chains' one rule each again, one
// transaction: a base chain whose rule someone removed sends the job's
// ports to their chains again. The jobs' chains and the maps' entries are
// kept. Errors: nft's.
func EnsureTable(ctx context.Context, run Runner) error {
	return run(ctx, tableScript())
}

// Remove removes j's rules with run: one transaction, else statement by
// statement (what is already gone is no error). Errors: the statements
// that failed for another reason than their object's absence.
func Remove(ctx context.Context, run Runner, j Job) error {
	stmts := removeStatements(j)
	if run(ctx, strings.Join(stmts, "\n")+"\n") == nil {
		return nil
	}
	var errs []error
	for _, s := range stmts {
		if err := run(ctx, s+"\n"); err != nil && !strings.Contains(err.Error(), "No such file or directory") {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// GroupName returns how nft names the cgroup v2 directory dir, whose
// hierarchy is mounted at mount: dir's path relative to CgroupMount, and
// its depth below mount. Errors: dir not below both.
func GroupName(dir, mount string) (name string, level int, err error) {
	dir, mount = filepath.Clean(dir), filepath.Clean(mount)
	rel, err := filepath.Rel(CgroupMount, dir)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return "", 0, fmt.Errorf("the cgroup v2 group %s is not below %s, where nft names groups", dir, CgroupMount)
	}
	inMount, err := filepath.Rel(mount, dir)
	if err != nil || inMount == "." || strings.HasPrefix(inMount, "..") {
		return "", 0, fmt.Errorf("the cgroup v2 group %s is not below its mount %s", dir, mount)
	}
	return rel, len(strings.Split(inMount, "/")), nil
}

// Probe checks that a job's rules let its own collector be reached: a TCP
// connection from this process (root) to 127.0.0.1:port, within timeout.
// It fails where the kernel cannot tell the listener's group (socket
// cgroupv2 matches nothing where the v1 net_cls or net_prio controllers
// are in use, which turns the kernel's v2 socket tracking off), so that
// the job is not left with ports that reset everyone.
func Probe(port int, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), timeout)
	if err != nil {
		return fmt.Errorf("the job's collector is not reachable through the filter: %w", err)
	}
	return c.Close()
}

// ParseMode checks a port_filter value. Errors: not one of the modes.
func ParseMode(v string) (string, error) {
	if slices.Contains([]string{ModeAuto, ModeRequire, ModeOff}, v) {
		return v, nil
	}
	return "", fmt.Errorf("port_filter wants %s, %s or %s, not %q", ModeAuto, ModeRequire, ModeOff, v)
}
