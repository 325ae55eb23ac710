package callbacks

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gym-otel-spank/gym-otel-spank/helper/cgroup"
	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/portfilter"
	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
	"github.com/gym-otel-spank/gym-otel-spank/helper/record"
)

// nftRunner runs nft for the prolog and the epilog; tests replace it.
var nftRunner = func() portfilter.Runner {
	if p := portfilter.Nft(); p != "" {
		return portfilter.NftRunner(p)
	}
	return nil
}

// probeTimeout bounds the prolog's check that the job's collector is
// reachable through its new rules.
const probeTimeout = time.Second

// filterPorts installs the node's packet filter for the job's loopback
// ports, as root chose them, before the supervisor starts (portfilter):
// from then on only sockets of the job's cgroup receive connections on
// them and only the job's uid (and root) connects, so that whoever binds
// one of them before the collector does gets nothing, and a collector
// restart's gap is kept the same way until the epilog removes the rules.
// It notes the ports in rec for the epilog. Where the node cannot filter
// (no nft, no cgroup v2 group below /sys/fs/cgroup, nft refused), the
// plugstack's port_filter decides: require returns the error (no
// collector), auto logs a warning once per node and reason and goes on,
// off never gets here. The chains are named by cluster (SLURM_CLUSTER_NAME)
// and node, which rec notes too (FilterCluster).
func filterPorts(ctx context.Context, a Args, cluster, node string, jobID, uid uint32, group *cgroup.Group, ports []int, rec *record.Record, log logrus.FieldLogger) error {
	if a.PortFilter == portfilter.ModeOff {
		return nil
	}
	err := installFilter(ctx, cluster, node, jobID, uid, group, ports)
	if err == nil {
		rec.FilterPorts, rec.FilterCluster, rec.FilterLegacy = ports, cluster, false
		return nil
	}
	if errors.Is(err, portfilter.ErrPortHeld) {
		return err // the start chooses new ports
	}
	return filterUnavailable(a, node, err, log)
}

// filterUnavailable is port_filter's answer to a node that cannot keep the
// job's ports (why: err): require, the error; auto, a warning once per
// node and kind of reason, and nil.
func filterUnavailable(a Args, node string, err error, log logrus.FieldLogger) error {
	if a.PortFilter == portfilter.ModeRequire {
		return fmt.Errorf("port_filter=require: the job's ports cannot be kept to the job on this node: %v", err)
	}
	warnOnce(a.RecordDir, node, ".port-filter-warned", digits().ReplaceAllString(err.Error(), "N"), func() {
		log.Warnf("the job's loopback ports are not kept to the job on %s (plugstack port_filter=auto): %v; other local users can connect to a job's collector and take its ports before its start and after a restart (admin guide: the packet filter)", node, err)
	})
	return nil
}

// proveFilter checks, once the supervisor reports ready, that processes of
// the job's cgroup, and only they, listen on every port it reports in use
// (launch.ListenersIn) and that root reaches the collector through the
// rules at probe. A port with another listener fails the start whatever
// port_filter says; where the rules let nothing through (the kernel cannot
// tell the listener's group), they are removed and port_filter decides
// (filterUnavailable). Nothing to prove where no rules were installed
// (rec.FilterPorts empty): the supervisor proved its ports itself.
func proveFilter(ctx context.Context, a Args, node string, jobID uint32, group *cgroup.Group, ports []int, probe int, rec *record.Record, log logrus.FieldLogger) error {
	if len(rec.FilterPorts) == 0 {
		return nil
	}
	if err := listenersOurs(group, ports); err != nil {
		return fmt.Errorf("the job's ports are not its collector's: %v", err)
	}
	if err := portfilter.Probe(probe, probeTimeout); err != nil {
		releasePorts(ctx, rec, node, jobID, log)
		rec.FilterPorts = nil
		return filterUnavailable(a, node, err, log)
	}
	return nil
}

// installFilter installs the rules for ports, kept to group. The nft
// program is required (it writes where netlink refuses, and the sweep
// lists the table with it where netlink cannot), though the prolog's own
// writes go through netlink. Errors: why not (no nft, no v2 group, nft's),
// portfilter.ErrPortHeld.
func installFilter(ctx context.Context, cluster, node string, jobID, uid uint32, group *cgroup.Group, ports []int) error {
	run := nftRunner()
	if run == nil {
		return fmt.Errorf("no nft program (the nftables package)")
	}
	if group == nil {
		return fmt.Errorf("the collector has no cgroup")
	}
	dir, mount, ok := group.V2()
	if !ok {
		return fmt.Errorf("the collector's cgroup has no cgroup v2 (unified) directory")
	}
	name, level, err := portfilter.GroupName(dir, mount)
	if err != nil {
		return err
	}
	j := portfilter.Job{ID: jobID, Cluster: cluster, Node: node, UID: uid, Ports: ports, Group: name, Level: level}
	// Through netlink, no program run: into the table as it is, else
	// with the table set first (the node's first job). The nft program
	// for what is left (netlink refused), and the error to report. A
	// port the table keeps to another job already is that job's (the
	// ports were chosen among the others, portSkip: it came in since, a
	// concurrent prolog's): the start chooses again (ErrPortHeld), and
	// Install, which would take the entry over, is not run.
	err = portfilter.AddJob(j)
	if err != nil && !errors.Is(err, portfilter.ErrPortHeld) && portfilter.SetTable() == nil {
		err = portfilter.AddJob(j)
	}
	if err == nil || errors.Is(err, portfilter.ErrPortHeld) {
		return err
	}
	return portfilter.Install(ctx, run, j)
}

// setTable sets the node's table again (portfilter.SetTable, through
// netlink), else with the nft program (portfilter.EnsureTable), whose
// error is returned.
func setTable(ctx context.Context) error {
	if portfilter.SetTable() == nil {
		return nil
	}
	run := nftRunner()
	if run == nil {
		return fmt.Errorf("no nft program (the nftables package)")
	}
	return portfilter.EnsureTable(ctx, run)
}

// listenersOurs proves that processes of group, and only they, listen on
// every one of ports (launch.ListenersIn over the sockets of the group's
// processes). Errors: a port with no listener or another's, explained
// where root could not read the group's descriptors.
func listenersOurs(group *cgroup.Group, ports []int) error {
	ours := map[uint64]bool{}
	var unreadable []int
	var readErr error
	for _, pid := range group.Pids() {
		inos, err := proc.ReadSocketInodes(pid)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			unreadable, readErr = append(unreadable, pid), err
		}
		for _, ino := range inos {
			ours[ino] = true
		}
	}
	err := launch.ListenersIn(ports, ours)
	if err != nil && len(unreadable) > 0 {
		err = fmt.Errorf("%w; but root could not read the descriptors of %d of the group's processes (%v): root without CAP_SYS_PTRACE (as in a container) cannot see the sockets of the supervisor and the collector, which are not dumpable", err, len(unreadable), readErr)
	}
	return err
}

// releasePorts removes the job's rules that rec notes (the epilog, after
// the collector's group has ended; the sweep of a stale record), by the
// chain names its prolog gave them: of rec's cluster, or the legacy names
// of a prolog before the cluster was in them (rec.FilterLegacy: a job that
// started before an upgrade). Errors are logged.
func releasePorts(ctx context.Context, rec *record.Record, node string, jobID uint32, log logrus.FieldLogger) {
	if rec == nil || len(rec.FilterPorts) == 0 {
		return
	}
	if err := removeRules(ctx, portfilter.Job{ID: jobID, Cluster: rec.FilterCluster, Node: node, Legacy: rec.FilterLegacy, Ports: rec.FilterPorts}); err != nil {
		log.Warnf("job %d: removing the packet filter of ports %v: %v", jobID, rec.FilterPorts, err)
	}
}

// removeRules removes j's rules through netlink (portfilter.RemoveJob),
// else with the nft program (portfilter.Remove), whose error is returned;
// tests replace it.
var removeRules = func(ctx context.Context, j portfilter.Job) error {
	err := portfilter.RemoveJob(j)
	if err == nil {
		return nil
	}
	if run := nftRunner(); run != nil {
		return portfilter.Remove(ctx, run, j)
	}
	return err
}

// digits are the job's own numbers in a reason (ids, ports, paths), so
// that the once-per-node warning is once per kind of reason.
var digits = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[0-9]+`) })

// warnOnce calls warn unless the marker file name in root's record dir for
// the node already holds key (one line; written after the call): the
// once-per-node warnings of the deadline's settings, the submit filter and
// the packet filter.
func warnOnce(recordDir, node, name, key string, warn func()) {
	marker := filepath.Join(recordDir, node, name)
	want := strings.ReplaceAll(key, "\n", " ") + "\n"
	if old, err := readBounded(marker, 4096); err == nil && old == want {
		return
	}
	warn()
	_ = os.WriteFile(marker, []byte(want), 0o600)
}

// portSkip is what the job's ports are not chosen among (launch.
// ChoosePorts): slurm.conf's SrunPortRange, where sruns on this node
// listen (a job's stale rule there would reset an srun's launch answer),
// and the ports the node's packet filter keeps to a job already (a port
// of a job whose epilog never ran, or of a concurrent prolog's choice),
// whose rules the job's would take over. A table that cannot be read
// (none yet, port_filter=off, no netlink) skips none of its ports.
func (st *launchState) portSkip() func(port int) bool {
	var srun launch.PortRange
	if st.srunPorts != "" {
		r, err := launch.ParsePortRange(st.srunPorts)
		if err != nil {
			st.log.Debugf("slurm.conf SrunPortRange: %v", err)
		}
		srun = r
	}
	var held map[int]bool
	if st.in.Args.PortFilter != portfilter.ModeOff {
		var err error
		if held, err = portfilter.HeldPorts(); err != nil {
			st.log.Debugf("job %d: the packet filter's ports on %s: %v", st.in.JobID, st.node, err)
		}
	}
	return func(port int) bool { return srun.Has(port) || held[port] }
}
