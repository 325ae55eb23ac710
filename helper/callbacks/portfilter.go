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

// keepPorts installs the node's packet filter for the job's loopback ports
// once its collector holds them (portfilter), before root's record gives
// any task the endpoint, and notes the ports in rec for the epilog. Where
// the node cannot filter (no nft, no cgroup v2 group below
// /sys/fs/cgroup, nft refused, the collector unreachable through the
// rules), the plugstack's port_filter decides: require returns the error
// (no collector), auto logs a warning once per node and reason and goes
// on, off never gets here. probe is the port the check connects to.
func keepPorts(ctx context.Context, a Args, node string, jobID, uid uint32, group *cgroup.Group, ports []int, probe int, rec *record.Record, log logrus.FieldLogger) error {
	if a.PortFilter == portfilter.ModeOff {
		return nil
	}
	err := installFilter(ctx, node, jobID, uid, group, ports, probe)
	if err == nil {
		rec.FilterPorts = ports
		return nil
	}
	var notOurs errNotOurs
	if errors.As(err, &notOurs) {
		// Not the node's limits but a report that does not match the
		// kernel: no collector, whatever port_filter says.
		return fmt.Errorf("the supervisor's report names ports its collector does not hold: %v", notOurs.err)
	}
	if a.PortFilter == portfilter.ModeRequire {
		return fmt.Errorf("port_filter=require: the job's ports cannot be kept to the job on this node: %v", err)
	}
	warnOnce(a.RecordDir, node, ".port-filter-warned", digits.ReplaceAllString(err.Error(), "N"), func() {
		log.Warnf("the job's loopback ports are not kept to the job on %s (plugstack port_filter=auto): %v; other local users can connect to a job's collector and take its ports after a restart (admin guide: the packet filter)", node, err)
	})
	return nil
}

// errNotOurs: a reported port is not listened on by the job's cgroup.
type errNotOurs struct{ err error }

func (e errNotOurs) Error() string { return e.err.Error() }

// installFilter installs the rules and checks that the collector is
// reachable through them (else removes them). Errors: why not.
func installFilter(ctx context.Context, node string, jobID, uid uint32, group *cgroup.Group, ports []int, probe int) error {
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
	// The ports come from the supervisor's report, a process of the job's
	// user: root takes them only once the kernel shows that processes of
	// the job's own cgroup listen on every one, so that a forged report
	// cannot point the rules at another job's ports.
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
	if err := launch.ListenersIn(ports, ours); err != nil {
		if len(unreadable) > 0 {
			// Not a forged report, most likely: root could not look.
			err = fmt.Errorf("%w; but root could not read the descriptors of %d of the group's processes (%v): root without CAP_SYS_PTRACE (as in a container) cannot see the sockets of the supervisor and the collector, which are not dumpable", err, len(unreadable), readErr)
		}
		return errNotOurs{err}
	}
	j := portfilter.Job{ID: jobID, Node: node, UID: uid, Ports: ports, Group: name, Level: level}
	if err := portfilter.Install(ctx, run, j); err != nil {
		return err
	}
	if err := portfilter.Probe(probe, probeTimeout); err != nil {
		_ = portfilter.Remove(ctx, run, j)
		return err
	}
	return nil
}

// releasePorts removes the job's rules that rec notes (the epilog, after
// the collector's group has ended; the sweep of a stale record). Errors
// are logged.
func releasePorts(ctx context.Context, rec *record.Record, node string, jobID uint32, log logrus.FieldLogger) {
	if rec == nil || len(rec.FilterPorts) == 0 {
		return
	}
	run := nftRunner()
	if run == nil {
		log.Warnf("job %d: the packet filter of ports %v is left: no nft program", jobID, rec.FilterPorts)
		return
	}
	if err := portfilter.Remove(ctx, run, portfilter.Job{ID: jobID, Node: node, Ports: rec.FilterPorts}); err != nil {
		log.Warnf("job %d: removing the packet filter of ports %v: %v", jobID, rec.FilterPorts, err)
	}
}

// digits are the job's own numbers in a reason (ids, ports, paths), so
// that the once-per-node warning is once per kind of reason.
var digits = regexp.MustCompile(`[0-9]+`)

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
