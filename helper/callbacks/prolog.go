package callbacks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gym-otel-spank/gym-otel-spank/helper/cgroup"
	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/portfilter"
	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
	"github.com/gym-otel-spank/gym-otel-spank/helper/record"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
	"github.com/gym-otel-spank/gym-otel-spank/helper/taskenv"
	"github.com/gym-otel-spank/gym-otel-spank/helper/timing"
)

// SupervisorPath is the PATH the supervisor gets.
const SupervisorPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// PrologInput is what the C front hands the prolog.
type PrologInput struct {
	Args Args
	// ArgsErr is ParseArgs's error for the plugstack arguments (Args then
	// holds what parsed): the prolog records the failure and starts
	// nothing.
	ArgsErr error
	// Encoded and Token are SPANK_GYM_OTEL_SPEC (the resolved settings,
	// encoded) and SPANK_GYM_OTEL_TOKEN.
	Encoded, Token string
	JobID          uint32
	UID, GID       uint32
	// Getenv reads the prolog's environment (SLURMD_NODENAME,
	// SLURM_JOB_NODELIST, SLURM_ARRAY_*, SLURM_CLUSTER_NAME, SLURM_JOB_GPUS,
	// CUDA_VISIBLE_DEVICES).
	Getenv func(string) string
}

// NodeName is this node's name: SLURMD_NODENAME, else the short host name.
func NodeName(getenv func(string) string) string {
	if n := getenv("SLURMD_NODENAME"); n != "" {
		return n
	}
	h, _ := os.Hostname()
	if i := indexByte(h, '.'); i > 0 {
		h = h[:i]
	}
	return h
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// Prolog starts the job's supervisor on this node and writes root's record.
// It is only called when the job carries encoded settings. Whatever happens,
// it leaves a record (status=failed with the reason when it could not start
// a ready collector) unless the record dir itself cannot be made; the
// returned error is for the log only: the prolog always returns 0 to Slurm.
// Its steps, in order: the deadline, the node's housekeeping (tidyNode), the
// job's settings (acceptSettings), the job's user (jobAccount), the job's
// facts, the supervisor's environment (supervisorEnv) with the receiver
// token root mints; then, per attempt (launchState.start), the collector's
// cgroup (collectorGroup), root's choice of the ports, the node's packet
// filter for them (filterPorts), the supervisor's start, root's record
// before its report (status starting) and the report; then the proof of
// the ports through the filter (proveFilter) and the ready record
// (recordReady).
func Prolog(in PrologInput, log logrus.FieldLogger) error {
	// The steps' times for the ready line: the first one is the core's
	// load, from the C prolog's stamp (when plausible) to here.
	clock := newStepClock(time.Now())
	if t := launch.ParsePrologStart(in.Getenv(launch.EnvPrologStart)); !t.IsZero() && time.Since(t) >= 0 && time.Since(t) < time.Minute {
		clock = newStepClock(t)
	}
	clock.mark("load")
	// One deadline for everything below (timing.Policy; why it is the
	// plugstack's prolog_timeout: timeoutwarn.go).
	slurmConf := slurm.ReadSettings(in.Getenv("SLURM_CONF"))
	slurmBounds := slurmConf.Timeouts
	bounds := timing.Bounds{PrologTimeout: time.Duration(in.Args.PrologTimeout) * time.Second, SlurmProlog: slurmBounds.Prolog, SlurmEpilog: slurmBounds.Epilog}
	ctx, cancel := context.WithTimeout(context.Background(), timing.Deadline(bounds.PrologTimeout, bounds.SlurmProlog))
	defer cancel()
	deadline, _ := ctx.Deadline()
	node := NodeName(in.Getenv)
	dir, err := record.MakeJobDir(in.Args.RecordDir, node, in.JobID)
	if err != nil {
		return err
	}
	// The node's housekeeping runs beside the collector's start, not
	// before it (it concerns other jobs only), once the supervisor is
	// forked and its gate open; the prolog returns once it ends.
	tidy := newSideTask(func() error {
		tidyNode(ctx, in, node, slurmBounds, log)
		return nil
	})
	defer tidy.wait()
	rec := &record.Record{Status: record.StatusFailed, OnFailure: "continue", UID: in.UID}
	fail := func(err error) error {
		// A failed record carries no task env: nothing of what failed
		// (a value the record format cannot hold) is written again. The
		// reason may quote the user's collector log: one short line of
		// printable text, in the record and in slurmd's log.
		rec.Status, rec.Env = record.StatusFailed, nil
		rec.Reason = record.UserText(err.Error(), record.MaxReasonBytes)
		// No collector holds the ports now (every failure after the
		// supervisor's start ended it): their rules go, so that no later
		// listener of the node is reset on them.
		releasePorts(context.Background(), rec, node, in.JobID, log)
		rec.FilterPorts = nil
		err = errors.New(rec.Reason)
		if werr := record.Write(dir, rec); werr != nil {
			return errors.Join(err, werr)
		}
		return err
	}
	resolved, pol, err := acceptSettings(in, bounds, node, rec, log)
	if err != nil {
		return fail(err)
	}
	clock.mark("settings")
	u, groups, err := jobAccount(ctx, in, log)
	if err != nil {
		return fail(err)
	}
	clock.mark("account")
	facts, err := prologFacts(ctx, in, resolved, node, u.Name, log)
	if err != nil {
		return fail(err)
	}
	factsJSON, err := json.Marshal(facts)
	if err != nil {
		return fail(err)
	}
	timeout := min(pol.ReportWait, time.Until(deadline)-timing.KillReserve)
	if timeout <= 0 {
		return fail(fmt.Errorf("no time left for the collector within the prolog's deadline (plugstack prolog_timeout=%d)", in.Args.PrologTimeout))
	}
	env, err := supervisorEnv(in, resolved, factsJSON, dir, u, log)
	if err != nil {
		return fail(err)
	}
	hold, controlPath, err := controlListener(dir)
	if err != nil {
		log.Warnf("job %d: no control socket on %s (the batch step waits its full final-scrape bound; no step phase spans): %v", in.JobID, node, err)
	} else {
		defer hold.Close() // after the launch: the supervisor's copy serves on
	}
	// Root's choices, handed down: the receiver token (the supervisor's
	// environment, never a file or argv) and, per attempt, the ports.
	token, err := launch.MintToken()
	if err != nil {
		return fail(err)
	}
	env = append(env, launch.EnvReceiverToken+"="+token)
	st := &launchState{in: in, dir: dir, rec: rec, resolved: resolved, facts: facts, token: token, controlPath: controlPath, node: node, log: log, srunPorts: slurmConf.SrunPortRange}
	defer st.tableDone()
	st.energy = hostEnergy(in, node, log)
	if hostHwmon(in.Args.HostPower, st.energy) {
		env = append(env, launch.EnvHostPower+"="+launch.HostPowerHwmon)
	}
	defer closeZones(st.energy) // after the launch: the supervisor's copies serve on
	clock.mark("facts+env")
	st.beside = tidy.start
	sup, rep, err := st.start(ctx, env, groups, hold, timeout, clock)
	if hold != nil {
		hold.Close() // the supervisor's copy alone: once it ends, connects are refused
	}
	if err != nil {
		return fail(err)
	}
	if err := proveFilter(ctx, in.Args, node, in.JobID, st.group, rep.Ports.Loopback(), rep.Ports.Health, rec, log); err != nil {
		sup.kill()
		return fail(err)
	}
	clock.mark("proof")
	if hold != nil && !rep.Control {
		log.Warnf("job %d: the supervisor on %s does not serve the control socket it was handed (the batch step waits its full final-scrape bound; no step phase spans)", in.JobID, node)
		rec.ControlSocket = ""
	}
	if err := recordReady(dir, rec, sup); err != nil {
		return fail(err)
	}
	clock.mark("record")
	tidy.wait()
	group := st.group
	where := "no cgroup"
	if group != nil {
		where = "cgroup " + group.Rel
	}
	log.Infof("job %d: collector ready on %s (supervisor pid %d, OTLP http 127.0.0.1:%d, output %s, %d ms, %s)",
		in.JobID, node, sup.pid, rep.Ports.OTLPHTTP, rep.OutputDir, rep.ReadyMillis, where)
	log.Debugf("job %d: start steps on %s in ms: prolog %s; supervisor %s; beside them the node's housekeeping %d",
		in.JobID, node, clock, record.UserText(rep.Steps, 256), tidy.took.Milliseconds())
	return nil
}

// tidyNode is the prolog's care of the node, whatever the job: the
// once-per-node warnings about the deadline's settings and the submit
// filter, and the sweep of stale records and orphaned groups of earlier
// jobs, stopped where the prolog's own kill and one query to Slurm still
// fit before ctx's deadline.
func tidyNode(ctx context.Context, in PrologInput, node string, slurmBounds slurm.Timeouts, log logrus.FieldLogger) {
	deadline, _ := ctx.Deadline()
	warnTimeouts(in.Args.RecordDir, node, in.Args.PrologTimeout, slurmBounds, log)
	warnSubmitFilter(in.Args.RecordDir, node, in.Getenv("SLURM_CONF"), log)
	sweepCtx, sweepDone := context.WithDeadline(ctx, deadline.Add(-timing.KillReserve-timing.QueryBound))
	SweepStale(sweepCtx, in.Args.RecordDir, in.Getenv("SLURM_CLUSTER_NAME"), node, in.JobID, log)
	sweepDone()
}

// acceptSettings decodes the job's encoded settings and decides whether this
// node starts a collector for it: the node's pins applied (logged), the
// settings valid here, a token present, the job not root's. It fills what
// the record says of the job whatever the outcome (on_failure, the variables
// to unset, the final wait and drain bounds) and returns the settings and
// its timing policy.
func acceptSettings(in PrologInput, bounds timing.Bounds, node string, rec *record.Record, log logrus.FieldLogger) (*config.Resolved, timing.Policy, error) {
	resolved, err := config.Decode(in.Encoded)
	if err != nil {
		return nil, timing.Policy{}, err
	}
	if resolved.Otel.OnFailure == "fail" {
		rec.OnFailure = "fail"
	}
	if in.ArgsErr != nil {
		return nil, timing.Policy{}, fmt.Errorf("the collector is off for this job: %w", in.ArgsErr)
	}
	// The node's own site file decides the keys it pins: a user value, or
	// encoded settings set by hand through libslurm, never chooses them here.
	pinned, err := config.EnforcePins(resolved, in.Args.Site, in.Args.SiteItems)
	if err != nil {
		return nil, timing.Policy{}, err
	}
	for _, line := range pinned {
		log.Warnf("job %d: %s", in.JobID, line)
	}
	rec.Unset = unsetNames(resolved.Otel.TokenEnv)
	if _, err := resolved.Validate(nil); err != nil {
		return nil, timing.Policy{}, fmt.Errorf("the job's spec does not validate on node %s: %w", node, err)
	}
	if in.Token == "" && resolved.Otel.RemoteExport() {
		return nil, timing.Policy{}, fmt.Errorf("the job carries no token (GYM_OTEL_TOKEN): was %s set in the submitting shell?", resolved.Otel.TokenEnv)
	}
	pol := timing.For(resolved.Otel, bounds)
	rec.FinalWait = timing.Seconds(pol.FinalWait)
	rec.DrainTimeout = timing.Seconds(pol.DrainWait)
	if in.UID == 0 {
		return nil, timing.Policy{}, fmt.Errorf("jobs of root (uid 0) get no collector: it runs as the job's user, and root's would run with every privilege")
	}
	return resolved, pol, nil
}

// jobAccount is the job's user as the supervisor runs: the ids are
// SPANK's (in.UID, in.GID); name, home and supplementary groups come from
// NSS, bounded (a hung LDAP or sssd cannot be cancelled): past the bound
// the collector starts with the job's primary group only (logged).
func jobAccount(ctx context.Context, in PrologInput, log logrus.FieldLogger) (account, []uint32, error) {
	deadline, _ := ctx.Deadline()
	nssBound := min(NSSBound, time.Until(deadline)-timing.KillReserve-time.Second)
	u, err := boundedAccount(ctx, in.UID, in.Getenv("SLURM_JOB_USER"), max(nssBound, 0))
	if errors.Is(err, errNSSTimeout) {
		log.Warnf("job %d: %v: the collector runs as uid %d with group %d only (no supplementary groups, no HOME)", in.JobID, err, in.UID, in.GID)
	} else if err != nil {
		return u, nil, err
	}
	groups := u.Groups
	if groups == nil {
		groups = []uint32{in.GID}
	}
	return u, groups, nil
}

// supervisorEnv is the supervisor's whole environment: the settings as this
// node decided it, the token, the job's facts, the record's path, PATH and
// the user's names, SLURM_CONF, and what the node knows of the job's end
// (the slurmd that ran the prolog, its binary, the job's end time).
func supervisorEnv(in PrologInput, resolved *config.Resolved, factsJSON []byte, dir string, u account, log logrus.FieldLogger) ([]string, error) {
	// The supervisor gets the settings, encoded, as this node decided them
	// (pins applied).
	encoded, err := resolved.Encode()
	if err != nil {
		return nil, err
	}
	env := []string{
		launch.EnvEncoded + "=" + encoded,
		resolved.Otel.TokenEnv + "=" + in.Token,
		launch.EnvFacts + "=" + string(factsJSON),
		launch.EnvRecord + "=" + filepath.Join(dir, contract.RecordFile),
		"PATH=" + SupervisorPath,
		"USER=" + u.Name,
		"LOGNAME=" + u.Name,
	}
	if u.Home != "" {
		env = append(env, "HOME="+u.Home)
	}
	env = append(env, launch.EnvPrologStart+"="+prologStart(in.Getenv, log))
	if c := in.Getenv("SLURM_CONF"); c != "" {
		env = append(env, "SLURM_CONF="+c) // the supervisor's liveness queries
	}
	// What the node knows of the job's end: the slurmd that runs this
	// prolog (the C prolog's parent on 22.05 to 26.05: prep/script forks
	// slurmd and execs slurmstepd) runs the epilog too; the supervisor asks Slurm only
	// once that slurmd is gone or the job's end time is long past.
	slurmd := slurmdPID(in.Getenv)
	if a, err := launch.SlurmdAnchor(slurmd); err == nil {
		env = append(env, launch.EnvSlurmd+"="+a)
		// The binary a later slurmd of this node must run to be adopted.
		if exe, err := launch.SlurmdExe(slurmd); err == nil {
			env = append(env, launch.EnvSlurmdExe+"="+exe)
		}
	} else {
		log.Warnf("job %d: the prolog's parent: %v (the supervisor asks Slurm whether the job runs)", in.JobID, err)
	}
	if end := launch.ParseJobEnd(in.Getenv("SLURM_JOB_END_TIME")); !end.IsZero() {
		env = append(env, launch.EnvJobEnd+"="+strconv.FormatInt(end.Unix(), 10))
	}
	if r := nvidiaRoot(NodeName(in.Getenv)); r != "" {
		env = append(env, launch.EnvNvidiaProc+"="+r)
	}
	if bin := earlyCollector(resolved.Otel); bin != "" {
		env = append(env, launch.EnvEarlyCollector+"="+bin)
	}
	return env, nil
}

// earlyCollector is the collector the supervisor's process execs at its
// start (launch.EnvEarlyCollector): otel.binary where the collector runs
// on the host, is named by an absolute path and is the product's own
// (launch.EarlyCollectorName, whose init takes the hand-over); else ""
// (the supervisor execs its collector once it has the run to give).
func earlyCollector(o config.Otel) string {
	if o.Container != "" || !filepath.IsAbs(o.Binary) || filepath.Base(o.Binary) != launch.EarlyCollectorName {
		return ""
	}
	return o.Binary
}

// slurmdPID is the pid of the slurmd that runs the job prolog: the C
// prolog's parent, which it sets in contract.EnvSlurmdPID (with
// collector_wait=step the core runs in a child of its own, whose parent is
// not slurmd); else this process's parent.
func slurmdPID(getenv func(string) string) int {
	if n, err := strconv.Atoi(getenv(contract.EnvSlurmdPID)); err == nil && n > 1 {
		return n
	}
	return os.Getppid()
}

// collectorGroup makes the job's collector cgroup on this node (nil when
// the node has none), its memory bounded (logged when at the site's cap),
// and names it in the record.
func collectorGroup(in PrologInput, resolved *config.Resolved, node string, rec *record.Record, log logrus.FieldLogger) (*cgroup.Group, error) {
	memBytes, capped := cgroupMemoryBytes(resolved.Otel.MemoryLimitMiB, in.Args.CgroupMemoryMaxMiB)
	if capped && in.Args.Cgroup != CgroupOff {
		log.Infof("job %d: the collector's cgroup is bounded at the site's cap, %d MiB (plugstack cgroup_memory_max_mib), below %d x otel.memory_limit_mib=%d",
			in.JobID, in.Args.CgroupMemoryMaxMiB, CgroupMemoryFactor, resolved.Otel.MemoryLimitMiB)
	}
	group, err := jobGroup(in.Args, in.Getenv("SLURM_CLUSTER_NAME"), node, in.JobID, memBytes, log)
	if err != nil {
		return nil, err
	}
	if group != nil {
		rec.Cgroup = group.Rel
		rec.CgroupMemory = group.MemoryLimitFile()
		rec.CgroupCpuset = group.CpusetFile()
	}
	return group, nil
}

// afterGate runs once root has opened the supervisor's gate, before its
// record names the supervisor: nothing in the product; a test's pause, in
// which the supervisor ends its start.
var afterGate = func() {}

// recordFallbackWait bounds the prolog's read of the report of a
// supervisor that was gone before root's record named it (it ended its
// start early): its report is in the pipe already, or never comes.
const recordFallbackWait = time.Second

// portAttempts bounds the prolog's choices of ports for one job: a later
// choice follows only a start that found one of the chosen ports bound by
// another socket (launch.Readiness.PortTaken), or kept to another job by
// the node's packet filter (portfilter.ErrPortHeld).
const portAttempts = 3

// launchState is what the prolog's start of the supervisor needs and
// leaves: the job, root's record being filled, the receiver token root
// minted, and the collector's group (made anew for each attempt).
type launchState struct {
	in          PrologInput
	dir         string
	rec         *record.Record
	resolved    *config.Resolved
	facts       jobfacts.Facts
	token       string
	controlPath string
	node        string
	log         logrus.FieldLogger
	group       *cgroup.Group
	// energy are the node's RAPL zones root opened for the supervisor
	// (host_power=rapl; nil: none).
	energy []launch.EnergyZone
	// beside, when not nil, starts what runs beside the collector's
	// start (the node's housekeeping) once the supervisor is forked and
	// its gate open: not before, where its forks would wait for the
	// supervisor's, and its CPU delay it. Idempotent.
	beside func()
	// table, when not nil, sets the node's table again (setTable),
	// begun once the job's rules went in.
	table *sideTask
	// srunPorts is slurm.conf's SrunPortRange ("": not set).
	srunPorts string
}

// tableDone waits for the node's table to be set again, if that began,
// and logs its failure: the job's rules are in, but a base chain someone
// emptied may not send the job's ports to them.
func (st *launchState) tableDone() {
	if st.table == nil {
		return
	}
	if err := st.table.wait(); err != nil {
		st.log.Warnf("job %d: the packet filter's table on %s was not set again (a base chain emptied by hand keeps the job's ports open to other users): %v", st.in.JobID, st.node, err)
	}
}

// sideTask is work the prolog runs beside the collector's start, on a
// goroutine of its own: begun once (start), waited for before the prolog
// returns (wait).
type sideTask struct {
	once sync.Once
	run  func() error
	done chan struct{}
	err  error         // run's, once done is closed
	took time.Duration // run's wall time, once done is closed
}

// newSideTask is run as a sideTask, not yet begun.
func newSideTask(run func() error) *sideTask {
	return &sideTask{run: run, done: make(chan struct{})}
}

// start begins t's run unless it has begun.
func (t *sideTask) start() {
	t.once.Do(func() {
		go func() {
			t0 := time.Now()
			t.err = t.run()
			t.took = time.Since(t0)
			close(t.done)
		}()
	})
}

// wait begins t's run unless it has begun, waits for its end and returns
// its error; again, at once.
func (t *sideTask) wait() error {
	t.start()
	<-t.done
	return t.err
}

// start chooses the job's ports, keeps them to the job's group in the
// node's packet filter, starts the supervisor with them (launch.EnvPorts),
// writes root's record (status starting: the ports, the task env and the
// supervisor known before its report) and waits up to timeout for the
// report: a ready one whose ports are root's, or an error (the supervisor
// and its group ended). A report that one of the ports was taken before
// the collector bound it starts again with new ports and a new group, up
// to portAttempts times while the prolog's deadline allows.
func (st *launchState) start(ctx context.Context, env []string, groups []uint32, hold *os.File, timeout time.Duration, clock *stepClock) (*supervisor, launch.Readiness, error) {
	in, rec := st.in, st.rec
	end := time.Now().Add(timeout)
	for attempt := 1; ; attempt++ {
		group, err := collectorGroup(in, st.resolved, st.node, rec, st.log)
		if err != nil {
			return nil, launch.Readiness{}, err
		}
		st.group = group
		clock.mark("cgroup")
		ports, err := launch.ChoosePorts(st.portSkip())
		if err != nil {
			dropGroup(group)
			return nil, launch.Readiness{}, err
		}
		// The supervisor starts while root installs the rules: it binds
		// none of the ports, and starts no collector, before root opens
		// its gate once they are in. So the rules are in before the
		// collector binds: whoever binds one of the ports in the gap is
		// not in the job's group and gets no connection (portfilter's
		// input rule), nor can another uid connect to the collector once
		// it listens (the output rule).
		gate, opener, err := os.Pipe()
		if err != nil {
			dropGroup(group)
			return nil, launch.Readiness{}, err
		}
		sup, err := startSupervisor(in.Args.CLI, append(env, launch.EnvPorts+"="+launch.FormatPorts(ports), launch.EnvSpawned+"="+launch.SpawnedNow()), in.UID, in.GID, groups, group, hold, gate, st.energy)
		gate.Close()
		if err != nil {
			opener.Close()
			dropGroup(group)
			return nil, launch.Readiness{}, fmt.Errorf("starting %s supervise: %w", in.Args.CLI, err)
		}
		clock.mark("fork")
		if err := filterPorts(ctx, in.Args, in.Getenv("SLURM_CLUSTER_NAME"), st.node, in.JobID, in.UID, group, ports.Loopback(), rec, st.log); err != nil {
			opener.Close() // the gate's end without its byte: the supervisor ends its start
			sup.kill()
			if !errors.Is(err, portfilter.ErrPortHeld) || attempt >= portAttempts || time.Until(end) < timeout/2 {
				return nil, launch.Readiness{}, err
			}
			st.log.Warnf("job %d: %v; choosing new ports (attempt %d of %d)", in.JobID, err, attempt+1, portAttempts)
			continue
		}
		clock.mark("filter")
		if len(rec.FilterPorts) > 0 && st.table == nil {
			// The node's table as the job's rules need it, set again
			// beside the start (installFilter left it as it was):
			// done before the prolog returns, so before any task.
			st.table = newSideTask(func() error { return setTable(ctx) })
			st.table.start()
		}
		_, err = opener.Write([]byte{launch.GateOpen})
		opener.Close()
		if err != nil {
			// The supervisor is gone already (the pipe's reader closed):
			// its report, or its absence, says why.
			st.log.Debugf("job %d: opening the supervisor's gate: %v", in.JobID, err)
		}
		if st.beside != nil {
			st.beside()
		}
		afterGate()
		var rep launch.Readiness
		if rerr := st.recordStarting(sup, ports); rerr != nil {
			// A supervisor that ended its start while the filter went in
			// (an output dir refused, a port taken) is gone before its
			// record: its report says why, and a port taken is chosen
			// anew. Else the record's error stands.
			if rep, err = sup.wait(min(recordFallbackWait, max(time.Until(end), 0))); err != nil || rep.Status != launch.StatusFailed {
				rep, err = launch.Readiness{}, rerr
			}
		} else {
			clock.mark("starting")
			rep, err = sup.wait(max(time.Until(end), 0))
		}
		if err == nil && rep.Status != launch.StatusReady {
			err = fmt.Errorf("the collector failed to start: %s", rep.Error)
		}
		if err == nil {
			err = sameHeld(ports, rep.Ports)
		}
		if err == nil {
			clock.mark("supervisor")
			return sup, rep, nil
		}
		sup.kill()
		if !rep.PortTaken || attempt >= portAttempts || time.Until(end) < timeout/2 {
			return nil, rep, err
		}
		st.log.Warnf("job %d: %v; choosing new ports (attempt %d of %d)", in.JobID, record.UserText(err.Error(), 300), attempt+1, portAttempts)
		releasePorts(ctx, rec, st.node, in.JobID, st.log)
		rec.FilterPorts = nil
	}
}

// nvidiaRoot is, per node, the NVIDIA driver's proc directory the
// job's supervisor names the job's GPUs from ("": its default,
// /proc/driver/nvidia, and nothing is passed). Only the tests' build of
// the core (tag gymotel_nvidia_test) sets it; nothing a user or a site
// sets reaches it.
var nvidiaRoot = func(node string) string { return "" }

// powercapRoot is where root opens the node's RAPL zones: the kernel's
// powercap class. Only this package's tests point it at a tree of their
// own; nothing a user or a site sets reaches it.
var powercapRoot = launch.PowercapRoot

// hostEnergy opens the node's RAPL energy counters for the job's
// supervisor where the site opted in (plugstack host_power=rapl, or
// auto): each zone's energy_uj read-only (launch.OpenRAPL), to be handed
// down as descriptors. A zone that cannot be opened is logged and left
// out; a node without RAPL gets none (logged at debug). nil when
// host_power is off or hwmon.
func hostEnergy(in PrologInput, node string, log logrus.FieldLogger) []launch.EnergyZone {
	if in.Args.HostPower != HostPowerRAPL && in.Args.HostPower != HostPowerAuto {
		return nil
	}
	zones, err := launch.OpenRAPL(powercapRoot)
	if err != nil {
		log.Warnf("job %d: host power on %s (plugstack host_power=%s): %v", in.JobID, node, in.Args.HostPower, record.UserText(err.Error(), 600))
	}
	if len(zones) == 0 {
		then := ""
		if in.Args.HostPower == HostPowerAuto {
			then = "; the supervisor reads the node's hwmon power meter, where it has one"
		}
		log.Debugf("job %d: host power on %s (plugstack host_power=%s): no RAPL zone under %s%s", in.JobID, node, in.Args.HostPower, powercapRoot, then)
	}
	return zones
}

// hostHwmon reports whether the supervisor reads the node's hwmon power
// meter itself (launch.EnvHostPower): host_power=hwmon, or auto where
// root opened no RAPL zone (zones).
func hostHwmon(hostPower string, zones []launch.EnergyZone) bool {
	return hostPower == HostPowerHwmon || hostPower == HostPowerAuto && len(zones) == 0
}

// closeZones closes root's copies of the zones' files.
func closeZones(zones []launch.EnergyZone) {
	for _, z := range zones {
		z.File.Close()
	}
}

// dropGroup removes the collector's group g (nil: none) of a start that
// failed before the supervisor ran in it.
func dropGroup(g *cgroup.Group) {
	if g != nil {
		_ = g.Remove()
	}
}

// sameHeld checks that a ready report's ports are root's choice: each
// port the supervisor reports in use is the one root chose for that use.
// Errors name the port.
func sameHeld(chosen, reported jobdir.Ports) error {
	if chosen != reported {
		return fmt.Errorf("the supervisor's report names ports %v, not the ports root chose (%v)", reported.Loopback(), chosen.Loopback())
	}
	return nil
}

// recordStarting writes root's record before the supervisor's report
// (status starting): the supervisor's pid and start time, the task env
// with root's ports and receiver token, the control socket's path, the
// node's collector dir and the backend. A step reads it as not ready; the
// epilog kills the group of a starting record and removes its rules.
func (st *launchState) recordStarting(sup *supervisor, ports jobdir.Ports) error {
	ps, err := proc.ReadStat(sup.pid)
	if err != nil {
		return fmt.Errorf("the supervisor (pid %d) is gone after its start: %w", sup.pid, err)
	}
	rec := st.rec
	rec.Status = record.StatusStarting
	rec.SupervisorPID = sup.pid
	rec.SupervisorStart = ps.StartTime
	rec.Env = taskenv.TaskEnv(st.resolved, st.facts, ports, st.token)
	// Lens' identity as the collector stamps it (render.LensAttrs of the
	// same facts), for every task's OTEL_RESOURCE_ATTRIBUTES.
	var lens []record.KV
	for _, a := range render.LensAttrs(render.JobOf(st.resolved, st.facts)) {
		lens = append(lens, record.KV{Key: a.Key, Value: a.Value})
	}
	rec.ResAttrs = taskenv.ResourceAttrs(lens)
	rec.ControlSocket = st.controlPath
	// What the batch step tells the job's output (spank/notice.c): where
	// this node's files are (computed here, as the supervisor computes
	// it from the same settings and facts, not taken from its report)
	// and where the collector ships them.
	rec.OutputDir = jobfacts.OutputDir(st.resolved, st.facts)
	rec.Backend = record.Backend(st.resolved.Otel.Endpoint)
	return record.Write(st.dir, rec)
}

// recordReady turns the starting record ready once the supervisor's
// report is in and its ports are proved: the supervisor checked to be
// alive still. On an error the supervisor is ended.
func recordReady(dir string, rec *record.Record, sup *supervisor) error {
	ps, err := proc.ReadStat(sup.pid)
	if err != nil || ps.StartTime != rec.SupervisorStart {
		sup.kill()
		return fmt.Errorf("the supervisor (pid %d) is gone after its report: %v", sup.pid, err)
	}
	rec.Status = record.StatusReady
	if err := record.Write(dir, rec); err != nil {
		sup.kill()
		return err
	}
	return nil
}

// unsetNames are the variables the steps remove from the task env: the
// token variable and Slurm's copies of the forwarded token.
func unsetNames(tokenEnv string) []string {
	out := []string{}
	if record.EnvName(tokenEnv) {
		out = append(out, tokenEnv)
	}
	return append(out, taskenv.TokenCopies...)
}

// usesArrayIDs reports whether the job's names depend on its array ids:
// job_dir or run_id holds %A or %a. Nothing else the collector or the task
// env carries does.
func usesArrayIDs(resolved *config.Resolved) bool {
	has := func(pattern string) bool {
		for i := 0; i+1 < len(pattern); i++ {
			if pattern[i] != '%' {
				continue
			}
			switch pattern[i+1] {
			case 'A', 'a':
				return true
			}
			i++ // %% and the other escapes
		}
		return false
	}
	return has(resolved.JobDir) || has(resolved.Identity.RunID)
}

func prologFacts(ctx context.Context, in PrologInput, resolved *config.Resolved, node, userName string, log logrus.FieldLogger) (jobfacts.Facts, error) {
	f := jobfacts.Facts{
		JobID:       strconv.FormatUint(uint64(in.JobID), 10),
		ArrayJobID:  in.Getenv("SLURM_ARRAY_JOB_ID"),
		ArrayTaskID: in.Getenv("SLURM_ARRAY_TASK_ID"),
		User:        userName,
		Node:        node,
		Cluster:     in.Getenv("SLURM_CLUSTER_NAME"),
		GPUs:        jobfacts.ParseGPUs(in.Getenv("SLURM_JOB_GPUS")),
		// Slurm's gres code sets it beside SLURM_JOB_GPUS in the
		// prolog's environment: the MIG UUIDs of MIG devices.
		GPUDevices: jobfacts.ParseGPUDevices(in.Getenv("CUDA_VISIBLE_DEVICES")),
		// Which run of the job this is (slurmd's prolog environment).
		RestartCount: in.Getenv("SLURM_JOB_RESTART_COUNT"),
		SLUID:        in.Getenv("SLURM_JOB_SLUID"),
	}
	if f.ArrayJobID == "" && usesArrayIDs(resolved) {
		// No release's prolog env has SLURM_ARRAY_* (22.05 to 26.05:
		// prep/script's _build_env) and the SPANK items are not available
		// there: ask slurmctld, once per node, bounded, and only when a
		// name needs the ids (job_dir or run_id with %A or %a).
		qctx, done := context.WithTimeout(ctx, timing.QueryBound)
		defer done()
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < timing.KillReserve+timing.QueryBound {
			log.Warnf("job %d: array ids not asked for: too little time left in the prolog", in.JobID)
		} else if j, known, err := slurm.Query(qctx, in.JobID); err != nil || !known {
			log.Warnf("job %d: array ids: %v (known to Slurm: %v)", in.JobID, err, known)
		} else {
			f.ArrayJobID, f.ArrayTaskID = j.ArrayJobID, j.ArrayTaskID
		}
	}
	// SLURM_JOB_GPUS holds GRES indexes: their devices' minors come from
	// the node's gres.conf.
	f.GPUMinors, f.GPUMinorsNote = gresMinors(in.Getenv("SLURM_CONF"), node, f.GPUs, in.JobID, log)
	nodelist := in.Getenv("SLURM_JOB_NODELIST")
	if nodelist == "" {
		nodelist = in.Getenv("SLURM_NODELIST")
	}
	if nodelist != "" {
		idx, err := slurm.NodeIndex(nodelist, node)
		if err != nil {
			return f, err
		}
		if idx < 0 {
			log.Warnf("job %d: node %s is not in SLURM_JOB_NODELIST=%s: writing as a non-first node", in.JobID, node, nodelist)
			idx = 1
		}
		f.NodeIndex = idx
		if nodes, err := slurm.ExpandHostlist(nodelist); err == nil && len(nodes) > 0 {
			f.HeadNode = nodes[0]
		}
	}
	return f, nil
}
