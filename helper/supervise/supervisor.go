package supervise

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gym-otel-spank/gym-otel-spank/helper/atomicfile"
	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/gpudev"
	"github.com/gym-otel-spank/gym-otel-spank/helper/heldir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/memory"
	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/helper/selfmetrics"
	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
	"github.com/gym-otel-spank/gym-otel-spank/helper/timing"
)

// Defaults of Options.
const (
	// DefaultHealthPoll is how often the health endpoint is polled at start:
	// its granularity adds to every job's start, and a refused loopback
	// connect costs microseconds.
	DefaultHealthPoll = 5 * time.Millisecond
	// DefaultRecordPoll is how often the root record's presence is checked.
	DefaultRecordPoll = 5 * time.Second
	// DefaultSlurmPoll is how often the supervisor checks, on the node,
	// whether its job's end will reach it (Options.SlurmdAlive), and the
	// first interval of the questions to Slurm when it cannot tell.
	DefaultSlurmPoll = 30 * time.Second
	// MaxSlurmPoll bounds the interval between two questions to Slurm
	// (each one doubles it, from SlurmPoll).
	MaxSlurmPoll = 10 * time.Minute
	// JobEndGrace is how long past the job's end time (Options.JobEnd) the
	// node still waits for the epilog before asking Slurm.
	JobEndGrace = 2 * time.Minute
	// DefaultMaxRestarts bounds the restarts of a collector that died mid-job.
	DefaultMaxRestarts = 3
	// bindRetries bounds the new port choices after a lost bind race.
	bindRetries = 3
)

// Options configure one supervisor run.
type Options struct {
	// MainStart is when the supervisor's main began (zero: unknown): the
	// start-up's steps tell the process's start ("spawn") from its
	// options ("options").
	MainStart time.Time
	// Resolved is the job's validated resolved settings.
	Resolved *config.Resolved
	// Facts are the job's facts on this node. Where Facts.GPUPCI is nil
	// and Slurm named GPUs, the supervisor fills it at start from the
	// NVIDIA driver's information files under NvidiaRoot.
	Facts jobfacts.Facts
	// NvidiaRoot is the NVIDIA driver's proc directory ("":
	// gpudev.DefaultRoot); a test writes a tree of its own.
	NvidiaRoot string
	// Token is the backend bearer token (the value of otel.token_env); it
	// goes into the collector's environment only.
	Token string
	// OutputDir defaults to jobfacts.OutputDir(Spec, Facts).
	OutputDir string
	// RecordPath is root's record of this job on this node; when it
	// disappears the job has ended and the supervisor drains ("" disables).
	RecordPath string
	// JobRunning asks Slurm whether the job still runs; nil uses squeue
	// when it is on PATH. An error means "unknown" and changes nothing.
	// It is called only when SlurmdAlive cannot vouch for the job's end
	// (nil, false, or past JobEnd + JobEndGrace), first after SlurmPoll,
	// then at intervals doubling up to MaxSlurmPoll.
	JobRunning func(ctx context.Context, jobID string) (bool, error)
	// SlurmdAlive reports whether the slurmd that ran the job's prolog on
	// this node still runs (the same pid and start time): that slurmd runs
	// the epilog, which ends the supervisor, so nothing needs to be asked.
	// nil: unknown (Slurm is asked).
	SlurmdAlive func() bool
	// JobEnd is the job's end time as of its start (the prolog's
	// SLURM_JOB_END_TIME, Slurm 23.02 and later); zero when unknown.
	JobEnd time.Time
	// NewSlurmd finds the node's slurmd after the one that ran the prolog
	// is gone (TheSlurmd): when Slurm then says the job still runs and
	// JobEnd is known, a non-nil result replaces SlurmdAlive, so a slurmd
	// restart or a `scontrol reconfigure` (which starts a new slurmd on
	// 23.11 and later) costs one question per node; JobEnd + JobEndGrace
	// still bounds the wait for an epilog that never comes (a slurmd
	// started without the plugin). nil: never adopted.
	NewSlurmd func() func() bool
	// Readiness receives the one launch.Readiness line (nil: none).
	Readiness io.Writer
	// Log receives the supervisor's own log lines (nil: logrus standard).
	Log *logrus.Logger
	// HealthPoll, RecordPoll, SlurmPoll and MaxRestarts default to the
	// Default* constants.
	HealthPoll, RecordPoll, SlurmPoll time.Duration
	MaxRestarts                       int
	// Signals delivers the drain request (nil: SIGTERM and SIGINT).
	Signals <-chan os.Signal
	// Ports, when its OTLP gRPC port is set, are the job's loopback ports
	// as root's prolog chose them (launch.EnvPorts): the collector binds
	// its five, this process its final-figures and cgroup-page ports,
	// the same ones at every restart, and no other port is ever chosen:
	// a port another socket took first fails the start with
	// launch.Readiness.PortTaken. Unset: this process chooses free ports
	// itself, anew after a lost bind race (a supervisor started by hand).
	Ports render.Ports
	// ReceiverToken, when set, is the receiver token root minted
	// (launch.EnvReceiverToken); unset: this process mints one.
	ReceiverToken string
	// FirstPorts, when it holds 4 ports, is the first choice of ports
	// (OTLP gRPC, OTLP HTTP, health, telemetry; the plugin's receiver's
	// port is a free one) instead of free ones: a
	// test hook to put a port another user holds in the way. Later choices
	// are free ports as always.
	FirstPorts []int
	// LogToOutputDir also appends the supervisor's log lines to
	// <output dir>/supervisor.log once the dir exists (the plugin's prolog
	// gives the supervisor no stderr).
	LogToOutputDir bool
	// NoCgroupMetrics: the supervisor serves no cgroup metrics
	// (cgroupmetrics.go) and the collector scrapes none.
	NoCgroupMetrics bool
	// ControlListener is the control socket's listener the prolog made as root
	// and handed on (InheritedControlListener; controlsock.go): the supervisor
	// serves root's lines on it and closes it at its end. nil: no hold
	// socket (the batch step waits its bound, the steps' phases are not
	// told).
	ControlListener *net.UnixListener
	// SpanCountMaxBytes is the most bytes of traces.jsonl and
	// metrics.jsonl together that the drain reads to count the spans the
	// span metrics connector did not (0: SpanCountMaxBytes, the
	// product's value); larger files make the drain wait for the
	// connector's flushes instead. A test hook for large files.
	SpanCountMaxBytes int64
	// HostEnergy are the node's RAPL zones root handed down
	// (InheritedEnergyZones; plugstack host_power=rapl): served, summed,
	// on the cgroup page (hostenergy.go) and closed at the end. nil: no
	// host energy.
	HostEnergy []launch.EnergyZone
}

// supervisor is one run's state.
type supervisor struct {
	opt     Options
	o       config.Otel
	pol     timing.Policy
	log     *logrus.Logger
	out     string // the output dir's path: for people, never for a file operation once the dir is held
	logPath string // collector.log under the held dir's base path
	ports   render.Ports
	rtoken  string
	tokens  *tokenServer // the token socket (tokensock.go); nil: none
	ptoken  string       // the plugin's token (render.PluginTokenEnv): the collector's and this process's only
	// foreign are the service targets seen served by another uid
	// (targetowners.go), for state.json.
	foreign   []jobdir.ForeignTarget
	coll      *collector
	restarts  int
	lastSpans int64
	spansAt   time.Time
	problems  string
	trouble   string // why the files could not be written (receipt.Receipt.WriteTrouble)
	// dir is the output dir held open (heldir), at its base path
	// "/proc/self/fd/<n>": every file the supervisor makes or reads in
	// the output dir goes through it (path). unheld: not yet (or never)
	// opened, when nothing may be written there.
	dir    *heldir.Dir
	at     string
	unheld bool
	// collectorYAML is the configuration the host collector runs with,
	// its files under the dir it inherits (render.Input.FilesAt).
	collectorYAML []byte
	// writeFailSeen: the log said that the files cannot be written.
	writeFailSeen bool
	started       time.Time
	steps         stepTimes // the start-up's steps, for the ready report
	// versionChecked: the collector's version was found new enough.
	versionChecked bool
	readinessSent  bool
	launchArgs     launchCmd
	// rundir is otel.container_runtime's {rundir}, removed at the end
	// ("": none made).
	rundir string

	// The receipt's figures (see receipt.go).
	final      *finalSink           // receives the collector's export at shutdown
	cgroups    *cgroupServer        // serves the job's cgroups (nil: not served)
	control    *controlServer       // answers the batch step's hold (nil: not started by the plugin)
	lastRead   selfmetrics.Counters // the running collector's last read counters
	lastReadAt time.Time
	figures    selfmetrics.Counters // the ended collector runs' counters, summed
	runs       int                  // collector runs ended (counted in figures)
	unknown    []string             // what the figures lack, one sentence each

	phases     *phases // the job's Slurm phases as spans (phases.go)
	phasesStop func()
	phaseBase  int64 // phase spans exported to the ended collector runs

	// The final scrape at the batch script's end (finalscrape.go).
	scrapeOnShutdown bool        // the configuration of the next start sets scrape_on_shutdown
	finalDone        bool        // the batch step asked for the final scrape
	collGone         bool        // no collector after the final scrape (its next run did not start)
	peer             *peerServer // a non-batch node's listener for the batch node's request (peers.go)
	peersAsked       bool
	drainCause       string             // what began the drain (the slurm.drain span's slurm.drain.cause)
	appended         []receipt.Appended // lines written after the collector's exit (afterdrain.go)
	files            *fileSender        // the delivery of the files to the backend (filedelivery.go; nil: the collector's exporter)

	// fqdn delivers the host name Prometheus hashes into its scrape
	// offsets (render.PrometheusFQDN), looked up during the start-up.
	fqdn chan string
	// firstScrape is what the last written configuration asked of the
	// first scrapes (nil: nothing).
	firstScrape *render.FirstScrape
}

// FirstScrapeLead is how long after the collector's configuration is written
// each scrape target's first scrape is placed (render.FirstScrape): the
// collector's start to its scrape loops (0.2-0.7 s measured on 2 busy
// cores, up to 1.2 s under heavy load) with a margin, since a loop that
// starts after its target's phase waits a whole interval.
const FirstScrapeLead = 900 * time.Millisecond

// fqdnWait bounds the wait for the host name lookup: without it the phases
// are left to Prometheus. A lookup that slow is the collector's too (it
// makes the same one before its scrape loops start), which would then miss
// the phases anyway.
const fqdnWait = 500 * time.Millisecond

// Run starts the job's collector, reports, supervises it until a drain
// request (Options.Signals), the job's end, or a fatal error, then drains.
// It returns nil after a clean drain; an error when the collector could not
// be made ready (after reporting failed) or did not shut down cleanly.
func Run(ctx context.Context, opt Options) error {
	s := &supervisor{opt: opt, o: opt.Resolved.Otel, pol: timing.For(opt.Resolved.Otel, timing.Bounds{}), log: opt.Log, started: time.Now()}
	s.steps.markSpawn(s.started, opt.MainStart)
	if s.log == nil {
		s.log = logrus.StandardLogger()
	}
	s.defaults()
	sigs := opt.Signals
	if sigs == nil {
		c := make(chan os.Signal, 2)
		signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
		defer signal.Stop(c)
		sigs = c
	}
	defer func() {
		s.release()
		if s.final != nil {
			s.final.close()
		}
		if s.control != nil {
			s.control.close()
		}
		if s.peer != nil {
			s.peer.close()
			os.Remove(s.path(PeerFile))
		}
		s.tokens.close()
		s.cgroups.close()
		if s.files != nil {
			s.files.cancel()
		}
		if s.dir != nil {
			s.dir.Close()
		}
		s.endAdopted()
		s.removeRunDir()
	}()
	if err := s.startUp(ctx, sigs); err != nil {
		// What the runtime left, before the report: the prolog ends
		// this process's group once it reads a failure.
		s.endAdopted()
		s.removeRunDir()
		s.fail(err)
		return err
	}
	return s.monitor(ctx, sigs)
}

func (s *supervisor) defaults() {
	if s.opt.HealthPoll == 0 {
		s.opt.HealthPoll = DefaultHealthPoll
	}
	if s.opt.RecordPoll == 0 {
		s.opt.RecordPoll = DefaultRecordPoll
	}
	if s.opt.SlurmPoll == 0 {
		s.opt.SlurmPoll = DefaultSlurmPoll
	}
	if s.opt.MaxRestarts == 0 {
		s.opt.MaxRestarts = DefaultMaxRestarts
	}
	if s.opt.SpanCountMaxBytes <= 0 {
		s.opt.SpanCountMaxBytes = SpanCountMaxBytes
	}
	if s.opt.JobRunning == nil {
		s.opt.JobRunning = squeueRunning
	}
	s.out = s.opt.OutputDir
	if s.out == "" {
		s.out = jobfacts.OutputDir(s.opt.Resolved, s.opt.Facts)
	}
	// Nothing is written into the output dir before it is held.
	s.unheld = true
}

// resolveGPUs names the job's GPUs by device (Facts.GPUPCI) from the
// driver's information files, before anything is rendered: the collector
// then keeps dcgm-exporter's series by pci_bus_id, and state.json records
// them for inspect. Where a device Slurm named is not found, GPUPCI stays
// nil and the GPUs are kept as Slurm named them.
func (s *supervisor) resolveGPUs() {
	f := &s.opt.Facts
	if f.GPUPCI != nil || (len(f.GPUs) == 0 && len(f.GPUDevices) == 0) {
		return
	}
	root := s.opt.NvidiaRoot
	if root == "" {
		root = gpudev.DefaultRoot
	}
	gpus, err := gpudev.Read(root)
	if err != nil {
		if !os.IsNotExist(err) {
			s.log.Warnf("the job's GPUs by device: %v (kept as Slurm named them)", err)
		}
		return
	}
	devs, unresolved := gpudev.Resolve(gpus, f.GPUs, f.GPUDevices, f.GPUMinors)
	if len(unresolved) > 0 {
		s.log.Warnf("the job's GPUs by device: %s (kept as Slurm named them)", strings.Join(unresolved, "; "))
		return
	}
	f.GPUPCI = devs
}

// base is the base path of the file operations in the output dir: the held
// dir's (at), "" while it is not held, the path itself for a supervisor
// made without Run (the package's own tests).
func (s *supervisor) base() string {
	switch {
	case s.at != "":
		return s.at
	case s.unheld:
		return ""
	}
	return s.out
}

// path is name in the output dir for a file operation (base); "" while
// the dir is not held, which every operation refuses.
func (s *supervisor) path(name string) string {
	if s.base() == "" {
		return ""
	}
	return filepath.Join(s.base(), name)
}

// fileBytes is the size of <signal>.jsonl in the output dir (0 when it
// cannot be read).
func (s *supervisor) fileBytes(signal string) int64 {
	p := s.path(jobdir.SignalFile(signal))
	if p == "" {
		return 0
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logName is collector.log's path for people.
func (s *supervisor) logName() string { return filepath.Join(s.out, jobdir.LogFile) }

// jobDir is the expanded job dir the output dir is below; for an output
// dir given explicitly elsewhere (Options.OutputDir), its parent.
func (s *supervisor) jobDir() string {
	j := jobfacts.ExpandJobDir(s.opt.Resolved.JobDir, s.opt.Facts)
	if rel, err := filepath.Rel(j, s.out); filepath.IsAbs(j) && err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../") {
		return j
	}
	return filepath.Dir(s.out)
}

// holdDir opens the output dir below the job dir without following a link
// (heldir.Open: refused when a dir on the way is another user's or a link,
// or the output dir others can write) and holds it for the supervisor's
// life; the dirs others can write are logged once.
func (s *supervisor) holdDir(mode os.FileMode) error {
	d, err := heldir.Open(s.jobDir(), s.out, mode)
	if err != nil {
		return fmt.Errorf("%w (job_dir %s)", err, s.opt.Resolved.JobDir)
	}
	s.dir, s.at, s.unheld = d, d.At(), false
	s.logPath = s.path(jobdir.LogFile)
	for _, w := range d.Warnings {
		s.log.Warnf("output dir: %s", w)
	}
	return nil
}

// startUp makes the output dir, checks the binary, takes root's ports (or
// chooses its own: Options.Ports) and starts
// the collector until it is healthy, within health_check_timeout_seconds.
func (s *supervisor) startUp(ctx context.Context, sigs <-chan os.Signal) error {
	ctx, cancel := context.WithTimeout(ctx, s.pol.HealthWait)
	defer cancel()
	go func() {
		select {
		case <-sigs: // a drain request during start-up: give up
			cancel()
		case <-ctx.Done():
		}
	}()
	mode, _ := strconv.ParseUint(s.o.OutputDirMode, 8, 32)
	if err := s.holdDir(os.FileMode(mode)); err != nil {
		return err
	}
	if s.opt.LogToOutputDir {
		if f, err := os.OpenFile(s.path(jobdir.SupervisorLogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o600); err == nil {
			s.log.SetOutput(io.MultiWriter(s.log.Out, f))
		}
	}
	if f, err := os.CreateTemp(s.at, ".gym-otel-write-test.*"); err != nil {
		return fmt.Errorf("output dir %s is not writable by %s: %w", s.out, s.opt.Facts.User, unwrapPath(err))
	} else {
		f.Close()
		os.Remove(f.Name())
	}
	s.resolveGPUs()
	if s.o.Container == "" {
		// Inside a container the collector's host name is the
		// container's: the phases are left to Prometheus there.
		s.fqdn = make(chan string, 1)
		go func() {
			h, err := render.PrometheusFQDN()
			if err != nil {
				h = ""
			}
			s.fqdn <- h
		}()
	}
	s.steps.mark("dir")
	keepPreviousRun(s.at, s.opt.Facts, s.logPath, s.log)
	s.reserve()
	s.writeState(jobdir.StatusStarting, "")
	s.steps.mark("keep+state")
	tok := make([]byte, 24)
	var err error
	s.rtoken = s.opt.ReceiverToken
	if s.rtoken == "" {
		if s.rtoken, err = launch.MintToken(); err != nil {
			return err
		}
	}
	// The plugin's token: the receiver of the phase spans and the final
	// figures' sink take it, the job's tasks are not given it (the
	// readiness report, root's record and every file are without it), so
	// what a task sends with what it is given cannot pass for what this
	// process tells. It is in the collector's environment and both
	// processes' memory, which the job's processes (the same uid) cannot
	// read: both are not dumpable (proc.NotDumpable, collector/
	// notdumpable.go).
	if _, err = rand.Read(tok); err != nil {
		return err
	}
	s.ptoken = "gos_" + hex.EncodeToString(tok)
	if s.final, err = newFinalSink(s.ptoken, s.opt.Ports.Final); err != nil {
		return s.portErr(fmt.Errorf("a loopback port for the collector's final figures: %w", err))
	}
	s.final.guard.setLog(s.log.Warnf)
	// The page serves the job's cgroups and the node's host energy
	// (hostenergy.go), either alone where the other is not there.
	meter := newHostEnergyMeter(s.opt.HostEnergy, s.log.Warnf)
	var cgr *cgroupReader
	if !s.opt.NoCgroupMetrics {
		if cgr, err = newCgroupReader(s.opt.Facts); err != nil {
			s.log.Warnf("the job's cgroup metrics are not served: the node's cgroup mounts: %v", err)
			cgr = nil
		}
	}
	if cgr != nil || meter != nil {
		if s.cgroups, err = newCgroupServer(cgr, s.opt.Ports.Cgroup, meter); err != nil {
			meter.close()
			if perr := s.portErr(err); errors.Is(perr, errBindRace) {
				// Root's port for the page, bound by another socket:
				// the collector would scrape whoever holds it.
				return fmt.Errorf("the cgroup page's loopback port: %w", perr)
			}
			s.log.Warnf("the job's cgroup metrics and host energy are not served: a loopback port: %v", err)
		} else {
			s.cgroups.ln.setLog(s.log.Warnf)
			meter.run(time.Duration(s.o.ScrapeIntervalSeconds) * time.Second)
		}
	}
	if s.opt.ControlListener != nil {
		// Started by the plugin, with the listener its prolog made: root's
		// steps tell their phases and the batch step asks how far the
		// scrapes are (controlsock.go). Without it the step waits its bound.
		s.control = newControlServer(s.opt.ControlListener)
	}
	// With a control socket the batch step asks for the final scrape at the
	// script's end: the first run scrapes every target as it stops. A
	// node without targets (the hold ends at once) has none to do.
	s.scrapeOnShutdown = s.control != nil && len(render.Targets(render.Input{Resolved: s.opt.Resolved, Job: render.JobOf(s.opt.Resolved, s.opt.Facts)})) > 0
	if s.control != nil && s.opt.Facts.NodeIndex > 0 {
		// The batch node's supervisor asks this one for its final
		// scrape through the job dir (peers.go).
		if s.peer, err = newPeerServer(s.at, s.opt.Facts.JobID, s.opt.Facts.RestartCount, s.control); err != nil {
			s.log.Warnf("no final-scrape listener for the batch node (the batch step waits its full bound): %v", err)
		}
	}
	if s.opt.Token != "" && s.base() != "" {
		// A nested submit inside the job takes the backend token from
		// here (tokensock.go); the collector's environment, where it
		// read it before, is not open to the job's processes.
		if s.tokens, err = newTokenServer(s.path(jobdir.TokenSocket), s.opt.Token); err != nil {
			s.log.Warnf("no token socket (a nested sbatch --gym-otel inside the job needs the token in its environment): %v", err)
		}
	}
	s.steps.mark("sockets")
	var last error
	for attempt := 0; attempt < bindRetries; attempt++ {
		if err := s.choosePorts(); err != nil {
			return err
		}
		if err := s.writeConfig(); err != nil {
			return err
		}
		s.steps.mark("config")
		err := s.launch(ctx)
		if err == nil {
			return nil
		}
		last = err
		if !errors.Is(err, errBindRace) {
			return err
		}
		if s.rootPorts() {
			// Root's ports, in its packet filter and its record: never
			// others. The prolog chooses anew (launch.Readiness.PortTaken).
			return err
		}
		s.log.Warnf("a port was taken before the collector bound it; choosing new ports (%v)", err)
	}
	return last
}

var errBindRace = errors.New("address already in use")

// rootPorts reports whether root chose the job's ports (Options.Ports).
func (s *supervisor) rootPorts() bool { return s.opt.Ports.OTLPGRPC != 0 }

// portErr marks err, a failure to bind one of root's ports, as a lost bind
// race (errBindRace), so that the prolog may choose new ports; unchanged
// when this process chooses its own.
func (s *supervisor) portErr(err error) error {
	if s.rootPorts() && errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%w: %v", errBindRace, err)
	}
	return err
}

// choosePorts sets the job's ports: root's (Options.Ports), else free ones
// (launch.FreePorts; Options.FirstPorts first).
func (s *supervisor) choosePorts() error {
	if s.rootPorts() {
		s.ports = s.opt.Ports
		s.ports.Cgroup = s.cgroups.port()
		return nil
	}
	p, err := launch.FreePorts(5)
	if err != nil {
		return err
	}
	if len(s.opt.FirstPorts) == 4 && s.ports == (render.Ports{}) {
		copy(p, s.opt.FirstPorts) // a test's first choice (Options.FirstPorts)
	}
	s.ports = render.Ports{OTLPGRPC: p[0], OTLPHTTP: p[1], Health: p[2], Telemetry: p[3], Plugin: p[4]}
	if s.final != nil {
		s.ports.Final = s.final.port()
	}
	s.ports.Cgroup = s.cgroups.port()
	return nil
}

// configPath is collector.yaml for a file operation.
func (s *supervisor) configPath() string { return s.path(jobdir.ConfigFile) }

// maxConfigEnv bounds the configuration passed in the collector's
// environment: Linux refuses an environment string over 128 KiB
// (MAX_ARG_STRLEN); rendered configurations are 5 to 8 KiB.
const maxConfigEnv = 120 << 10

func (s *supervisor) writeConfig() error {
	s.firstScrape = nil
	if s.fqdn != nil {
		select {
		case h := <-s.fqdn:
			s.fqdn <- h // for a later attempt
			if h != "" {
				s.firstScrape = &render.FirstScrape{At: time.Now().Add(FirstScrapeLead), Host: h}
			}
		case <-time.After(fqdnWait):
			s.fqdn = nil
			s.log.Warnf("the host name lookup took more than %v: each scrape target's first scrape comes at its hash offset (up to one interval)", fqdnWait)
		}
	}
	in := render.Input{
		Resolved:         s.opt.Resolved,
		Job:              render.JobOf(s.opt.Resolved, s.opt.Facts),
		Ports:            s.ports,
		OutputDir:        s.out,
		FirstScrape:      s.firstScrape,
		ScrapeOnShutdown: s.scrapeOnShutdown,
	}
	// collector.yaml, with the real paths, is for people, inspect and
	// replay. The host collector runs with the same configuration by
	// content (its environment, render.ConfigEnv), its files under the
	// output dir it inherits as descriptor 3: neither can be swapped by
	// whoever can rename dirs on the way. A container's collector reads
	// collector.yaml and writes the output dir through the runtime's binds,
	// by path (otel.container_runtime's {config} and {output}).
	y, err := render.Render(in)
	if err != nil {
		return err
	}
	if s.o.Container == "" {
		in.FilesAt = heldir.ChildAt(0)
		if s.collectorYAML, err = render.Render(in); err != nil {
			return err
		}
		if len(s.collectorYAML) > maxConfigEnv {
			return fmt.Errorf("the collector's configuration is %d KiB, more than its environment can hold (%d KiB): fewer model services or scrape targets", len(s.collectorYAML)>>10, maxConfigEnv>>10)
		}
	}
	if err := atomicfile.Write(s.configPath(), y, 0o600); err != nil {
		return err
	}
	s.launchArgs = s.launchCmd()
	return nil
}

// collectorEnv is the collector's whole environment: its tokens, a
// memory limit for the Go runtime, PATH and HOME. Nothing else is secret.
// The backend token is there only with otel.delivery: collector, where
// the collector's own exporter sends to the backend; with delivery from
// the files (the default) the supervisor sends and the collector has no
// backend exporter, so it gets only the receiver and plugin tokens
// (backendTokenInCollector).
//
// The backend token is referenced inside a larger string ("Bearer
// ${env:X}"), and there the collector (v0.161.0) expands the substituted value once more:
// "${env:HOME}" in a token would become the home directory and "$$" a
// single "$". Doubling every "$" (render.Escape) makes the value arrive byte for
// byte (tested with "$", "$$", "${", "${env:HOME}" in a token).
//
// GOGC stays at Go's default: a lower value saves 1-2 MiB of an idle
// collector's private memory and costs about 20 % (GOGC=50) to 60 %
// (GOGC=25) more CPU under load (docs/performance.md, P4M).
func (s *supervisor) collectorEnv() []string {
	var env []string
	if s.backendTokenInCollector() {
		env = append(env, s.o.TokenEnv+"="+render.Escape(s.opt.Token))
	}
	env = append(env,
		render.ReceiverTokenEnv+"="+s.rtoken, // hex: nothing to escape; referenced as a whole value
		render.PluginTokenEnv+"="+s.ptoken,   // likewise
		fmt.Sprintf("GOMEMLIMIT=%dMiB", memory.Of(s.o.MemoryLimitMiB, 0).GoMemLimitMiB),
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
	)
	if s.collectorYAML != nil {
		env = append(env, render.ConfigEnv+"="+string(s.collectorYAML))
	}
	if h := os.Getenv("HOME"); h != "" {
		env = append(env, "HOME="+h)
	}
	return env
}

// launchCmd is how the collector of the last written configuration
// starts: the host binary with its configuration by content and the held
// output dir as descriptor 3 (its cwd too); a container runtime with the
// paths of its binds.
func (s *supervisor) launchCmd() launchCmd {
	lc := launchCmd{env: s.collectorEnv(), log: s.logPath}
	if s.o.Container == "" {
		lc.argv, lc.dir = []string{s.o.Binary, "--config", "env:" + render.ConfigEnv}, s.dir
	} else {
		names := s.containerEnvNames()
		if strings.Contains(s.o.ContainerRuntime, RunDirPlaceholder) && s.rundir == "" {
			d, err := os.MkdirTemp("", "gym-otel-"+s.opt.Facts.JobID+"-")
			if err != nil {
				lc.err = fmt.Errorf("otel.container_runtime: the run dir for {rundir}: %w", err)
				return lc
			}
			s.rundir = d
		}
		lc.argv, lc.err = commandFor(s.o, filepath.Join(s.out, jobdir.ConfigFile), s.out, s.rundir, names)
		lc.env = containerEnv(lc.env, names)
	}
	return lc
}

// endAdopted ends what a container runtime left running after the
// collector's last run: the processes this supervisor adopted as their
// subreaper (their parent exited) in a session not its own, such as
// rootless Podman's pause process, which holds the user namespace and
// outlives `podman run`; on a node without the collector's cgroup nothing
// else would end it. They are SIGKILLed, reaped and logged, and the scan is
// made again until one finds none, within 2 s: a process killed in one
// scan can leave children of its own to this supervisor (conmon's
// `podman container cleanup`, which conmon starts when the container
// exits). A host collector leaves none.
func (s *supervisor) endAdopted() {
	if s.o.Container == "" {
		return
	}
	me := os.Getpid()
	own, err := proc.ReadStat(me)
	if err != nil {
		return
	}
	var ended []string
	killed := map[int]bool{} // killed, not yet reaped
	seen := map[int]bool{}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		found := false
		pids, _ := proc.Pids()
		for _, pid := range pids {
			if seen[pid] {
				continue
			}
			st, err := proc.ReadStat(pid)
			if err != nil || st.PPID != me || st.Session == own.Session || st.State == 'Z' {
				continue
			}
			comm, _ := proc.Comm(pid)
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				ended = append(ended, fmt.Sprintf("%d (%s)", pid, comm))
				killed[pid], seen[pid], found = true, true, true
			}
		}
		for pid := range killed {
			var ws syscall.WaitStatus
			if got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); got == pid || err != nil {
				delete(killed, pid)
			}
		}
		if !found && len(killed) == 0 {
			break
		}
	}
	if len(ended) == 0 {
		return
	}
	s.log.Infof("otel.container_runtime: ended what the runtime left running after the collector: %s", strings.Join(ended, ", "))
}

// removeRunDir removes {rundir} and everything in it, once no collector
// runs; what cannot be removed (a runtime's file of a subordinate uid) is
// logged and left. Dirs of mode 0 (an overlay file system's work dir, which
// rootless Podman leaves behind a container it failed to start) are made
// 0700 first: they are this user's.
func (s *supervisor) removeRunDir() {
	if s.rundir == "" {
		return
	}
	filepath.WalkDir(s.rundir, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() && d.Type()&fs.ModeSymlink == 0 {
			os.Chmod(p, 0o700) // before WalkDir reads it
		}
		return nil
	})
	err := os.RemoveAll(s.rundir)
	if errors.Is(err, fs.ErrPermission) {
		s.unshareRemove()
	}
	// A process the runtime left, ended just before, may still let go of
	// its files for a moment: try again within runDirRemoveBound.
	for deadline := time.Now().Add(runDirRemoveBound); err != nil; time.Sleep(100 * time.Millisecond) {
		if err = os.RemoveAll(s.rundir); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		s.log.Warnf("otel.container_runtime: removing the run dir %s: %v", s.rundir, err)
	}
	s.rundir = ""
}

// runDirRemoveBound bounds the removal of {rundir} at the supervisor's end.
const runDirRemoveBound = 2 * time.Second

// unshareRemove removes, inside the runtime's user namespace, the dirs
// in {rundir} the user cannot read after its own removal failed for want
// of permission:
// rootless Podman with the user's subordinate ids sometimes leaves an
// overlay dir of one of those ids (mode 0700) in its storage, which the
// user cannot enter but root of the namespace can. For a Podman line only
// (podmanUnshare), as the job's user with the line's own per-job
// environment (its `env` prefix and global options: XDG_RUNTIME_DIR,
// --root, --runroot; no token), within unshareBound; the pause
// process it may start again is ended (endAdopted). Nothing runs as root:
// the worst it can remove is what the user's namespace owns, in {rundir}.
// Its outcome is logged.
func (s *supervisor) unshareRemove() {
	// The dirs the user cannot read, only: Podman mounts its storage's
	// overlay dir again in the namespace, where rm cannot remove a mount
	// point (EBUSY); the user removes the rest after.
	var left []string
	filepath.WalkDir(s.rundir, func(p string, d fs.DirEntry, err error) error {
		if err != nil && errors.Is(err, fs.ErrPermission) && p != s.rundir {
			left = append(left, p)
			return fs.SkipDir
		}
		return nil
	})
	argv := podmanUnshare(s.launchArgs.argv, left)
	if len(left) == 0 || argv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), unshareBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if h := os.Getenv("HOME"); h != "" {
		cmd.Env = append(cmd.Env, "HOME="+h)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start).Milliseconds()
	s.endAdopted()
	if err != nil {
		s.log.Warnf("otel.container_runtime: podman unshare rm -rf in the run dir %s: %v (%d ms) %s", s.rundir, err, took, strings.TrimSpace(string(out)))
		return
	}
	s.log.Infof("otel.container_runtime: removed what the user could not in the run dir %s inside Podman's user namespace (podman unshare rm -rf, %d ms): %s", s.rundir, took, strings.Join(left, " "))
}

// unshareBound bounds `podman unshare rm -rf` at the supervisor's end:
// 0.24-1.1 s on a 2-core test host at load 10 to 20, where 2 of 4 runs
// still took more than 2 s. It comes out of the epilog's wait for the
// supervisor (timing.Policy.DrainWait), whose collector's stop is mostly
// unused; a supervisor still removing at its end is ended with the
// group, and the dir is left as before.
const unshareBound = 4 * time.Second

// podmanUnshare is the command that runs `rm -rf -- paths` in the user
// namespace of the Podman line argv (the collector's runtime command, its
// placeholders filled): argv up to its `run` subcommand (an `env VAR=...`
// prefix and Podman's global options kept), then `unshare rm -rf --
// paths`. nil when argv does not run podman (by its base name) with a
// `run` subcommand.
func podmanUnshare(argv, paths []string) []string {
	for i, a := range argv {
		if filepath.Base(a) != "podman" {
			continue
		}
		for r := i + 1; r < len(argv); r++ {
			if argv[r] == "run" {
				out := append(append([]string{}, argv[:r]...), "unshare", "rm", "-rf", "--")
				return append(out, paths...)
			}
		}
		return nil
	}
	return nil
}

// containerEnvNames are the variables a collector in a container needs
// from the runtime's environment: the tokens its configuration reads as
// ${env:...} (the backend token's only with otel.delivery: collector,
// backendTokenInCollector) and GOMEMLIMIT. A runtime that starts the
// container with a clean environment (apptainer --cleanenv, podman,
// enroot) passes them only when told: APPTAINERENV_<NAME> in its
// environment (containerEnv), or {envname} in otel.container_runtime.
func (s *supervisor) containerEnvNames() []string {
	var names []string
	if s.backendTokenInCollector() {
		names = append(names, s.o.TokenEnv)
	}
	return append(names, render.ReceiverTokenEnv, render.PluginTokenEnv, "GOMEMLIMIT")
}

// backendTokenInCollector reports whether the collector's configuration
// reads the backend token (otel.token_env): only its backend exporter
// (and, with otel.token_resource_attribute, its resource/backend_auth
// processor) does, rendered with otel.delivery: collector alone.
func (s *supervisor) backendTokenInCollector() bool {
	return s.o.CollectorDelivery() && s.o.TokenEnv != ""
}

// launch starts the collector and waits until it is healthy.
func (s *supervisor) launch(ctx context.Context) error {
	if s.launchArgs.err != nil {
		return s.launchArgs.err
	}
	argv := s.launchArgs.argv
	var logStart int64 // where this run's lines begin in the log
	if fi, err := os.Lstat(s.logPath); err == nil {
		logStart = fi.Size()
	}
	// Healthy by whom? Fail closed unless every port is the collector's.
	failed, err := s.startRun(ctx, 0, &s.steps)
	switch {
	case err == nil:
		if err = s.checkStartedVersion(ctx, logStart); err != nil {
			s.coll.abandon()
			return err
		}
		s.steps.mark("version")
		return nil
	case failed == startExec:
		if s.o.Container == "" {
			return fmt.Errorf("otel.binary: starting %s: %w", s.o.Binary, unwrapPath(err))
		}
		return fmt.Errorf("otel.container_runtime: starting %s: %w", argv[0], unwrapPath(err))
	case failed == startProof:
		// A listener of another user, or a port the collector does not
		// hold although something answered its health check: someone
		// else was faster. Choose new ports.
		return fmt.Errorf("%w: %v", errBindRace, err)
	}
	c := s.coll
	tail := tailFile(s.logPath, 8)
	if strings.Contains(tail, "address already in use") {
		return fmt.Errorf("%w: %s", errBindRace, lastLine(tail))
	}
	if s.o.Container == "" && errors.Is(err, errExited) && ctx.Err() == nil {
		// A collector too old for the rendered configuration exits: it
		// says so first (checkStartedVersion: it was not asked before
		// the start).
		if verr := checkVersion(ctx, s.o.Binary, versionEnv, s.versionBound()); verr != nil {
			return verr
		}
	}
	key := "otel.binary"
	if s.o.Container != "" {
		key = "otel.container"
	}
	if errors.Is(err, errExited) {
		return fmt.Errorf("%s: the collector exited before it was healthy (%v); last lines of %s:\n%s", key, c.Err(), s.logName(), tail)
	}
	return fmt.Errorf("otel.health_check_timeout_seconds: the collector was not healthy within %ds; last lines of %s:\n%s", s.o.HealthCheckTimeoutSeconds, s.logName(), tail)
}

// versionEnv is the environment of `otel.binary --version`.
var versionEnv = []string{"PATH=/usr/bin:/bin"}

// versionBound bounds `otel.binary --version`: the start's own
// (health_check_timeout_seconds); a loaded node may take seconds to load a
// large binary.
func (s *supervisor) versionBound() time.Duration {
	return time.Duration(s.o.HealthCheckTimeoutSeconds) * time.Second
}

// checkStartedVersion refuses a host collector older than
// render.MinCollectorVersion, once per supervisor, before the first ready
// report: from the version the healthy collector logged at its start (the
// lines from logStart of its log), else, when the log has no such line,
// from `otel.binary --version` (checkVersion). Asking the started
// collector rather than running the binary a second time before its start
// keeps a second load of a large binary off the job's start; the collector
// it refuses is stopped before anything is told of it. A container's
// collector is not checked.
func (s *supervisor) checkStartedVersion(ctx context.Context, logStart int64) error {
	if s.o.Container != "" || s.versionChecked {
		return nil
	}
	found, err := loggedVersion(s.o.Binary, s.logPath, logStart)
	if !found {
		err = checkVersion(ctx, s.o.Binary, versionEnv, s.versionBound())
	}
	s.versionChecked = err == nil
	return err
}

// provePorts proves that every port of the job is listened on by collector
// c's process group (verifyListeners): at the first start and after every
// restart, since whatever answers on a port is trusted with the job's
// telemetry and its receiver token.
func (s *supervisor) provePorts(c *collector) error {
	ports := []int{s.ports.OTLPGRPC, s.ports.OTLPHTTP, s.ports.Health, s.ports.Plugin}
	if s.ports.Telemetry != 0 {
		ports = append(ports, s.ports.Telemetry)
	}
	return verifyListeners(c.pid, ports)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// fail reports failed once and records the reason.
func (s *supervisor) fail(err error) {
	s.log.Errorf("collector not started: %v", err)
	s.writeState(launch.StatusFailed, err.Error())
	s.sendReadiness(launch.Readiness{Status: launch.StatusFailed, Error: err.Error(), OutputDir: s.out, SupervisorPID: os.Getpid(),
		PortTaken: s.rootPorts() && errors.Is(err, errBindRace)})
}

func (s *supervisor) sendReadiness(r launch.Readiness) {
	if s.readinessSent || s.opt.Readiness == nil {
		return
	}
	s.readinessSent = true
	if err := launch.WriteReadiness(s.opt.Readiness, r); err != nil {
		s.log.Warnf("report: %v", err)
	}
	if c, ok := s.opt.Readiness.(io.Closer); ok {
		c.Close()
	}
}

// releaseStartPagesAt is when, after the ready report, the supervisor
// releases its start's pages of its binary (proc.ReleaseStartPages).
var releaseStartPagesAt = []time.Duration{2 * time.Second, 30 * time.Second}

// monitor reports ready, then waits for a drain request, the job's end or
// the collector's death (restarted a bounded number of times).
func (s *supervisor) monitor(ctx context.Context, sigs <-chan os.Signal) error {
	ready := time.Since(s.started)
	s.log.Infof("collector ready in %d ms (%s): pid %d, OTLP gRPC %d, HTTP %d, health %d, output %s",
		ready.Milliseconds(), s.steps.String(), s.coll.pid, s.ports.OTLPGRPC, s.ports.OTLPHTTP, s.ports.Health, s.out)
	if fs := s.firstScrape; fs != nil {
		s.log.Infof("first scrapes placed at %s (host %s)", fs.At.UTC().Format("15:04:05.000"), fs.Host)
	}
	s.writeState(launch.StatusReady, "")
	s.sendReadiness(launch.Readiness{
		Status: launch.StatusReady, Ports: s.ports,
		SupervisorPID: os.Getpid(), CollectorPID: s.coll.pid, CollectorStart: s.coll.start,
		OutputDir: s.out, ReadyMillis: ready.Milliseconds(), Control: s.control != nil,
		Steps: s.steps.String(),
	})
	if s.opt.SlurmdAlive != nil {
		s.log.Infof("job %s: the epilog of this node's slurmd ends the collector; Slurm is asked only once that slurmd is gone or the job is past its end time", s.opt.Facts.JobID)
	}
	defer s.followSampled(ctx)()
	s.files = s.startFileDelivery()
	s.phasesStop = s.startPhases(ctx)
	// The supervisor lives as long as the job: the pages of its binary
	// that only its start mapped go once the loops above have run their
	// first rounds, and once more when the first minute's one-off work is
	// done (as the collector does to itself).
	for _, after := range releaseStartPagesAt {
		t := time.AfterFunc(after, func() { proc.ReleaseStartPages() })
		defer t.Stop()
	}
	selfTick := time.NewTicker(time.Second)
	defer selfTick.Stop()
	recordTick := time.NewTicker(s.opt.RecordPoll)
	defer recordTick.Stop()
	slurmTick := time.NewTicker(s.opt.SlurmPoll)
	defer slurmTick.Stop()
	ownerTick := time.NewTicker(TargetOwnerPoll)
	defer ownerTick.Stop()
	s.checkTargetOwners(launch.StatusReady)
	askEvery, nextAsk := s.opt.SlurmPoll, time.Time{}
	for {
		exited := s.coll.Exited()
		if s.collGone {
			exited = nil // no collector after the final scrape: nothing to restart
		}
		select {
		case sig := <-sigs:
			s.log.Infof("%v: draining", sig)
			s.drainCause = "signal " + sig.String()
			return s.drain()
		case <-ctx.Done():
			s.drainCause = "stopped"
			return s.drain()
		case <-s.finalRequests():
			if n := s.control.nodes.Load(); n > 1 && s.opt.Facts.NodeIndex == 0 && !s.peersAsked {
				s.peersAsked = true
				go s.askPeers(int(n), time.Now())
			}
			s.finalScrape(ctx)
		case <-exited:
			if err := s.restart(ctx); err != nil {
				s.writeState(launch.StatusFailed, err.Error())
				s.writeReceipt()
				return err
			}
		case <-selfTick.C:
			s.pollSelf()
		case <-ownerTick.C:
			s.checkTargetOwners(launch.StatusReady)
		case <-recordTick.C:
			if s.opt.RecordPath == "" {
				continue
			}
			if _, err := os.Stat(s.opt.RecordPath); errors.Is(err, os.ErrNotExist) {
				s.log.Infof("job record %s is gone: the job has ended; draining", s.opt.RecordPath)
				s.drainCause = "record gone"
				return s.drain()
			}
		case <-slurmTick.C:
			if s.endWillCome() || time.Now().Before(nextAsk) {
				continue
			}
			running, err := s.opt.JobRunning(ctx, s.opt.Facts.JobID)
			nextAsk = time.Now().Add(askEvery - s.opt.SlurmPoll/2)
			askEvery = min(2*askEvery, MaxSlurmPoll)
			gone := s.opt.SlurmdAlive == nil || !s.opt.SlurmdAlive()
			if err == nil && running && gone && s.opt.NewSlurmd != nil && !s.opt.JobEnd.IsZero() {
				if f := s.opt.NewSlurmd(); f != nil && f() {
					s.log.Infof("job %s still runs: the epilog of the node's new slurmd ends the collector (Slurm is asked again after the job's end time)", s.opt.Facts.JobID)
					s.opt.SlurmdAlive, askEvery, nextAsk = f, s.opt.SlurmPoll, time.Time{}
				}
			}
			if err == nil && !running {
				s.log.Infof("Slurm no longer runs job %s; draining", s.opt.Facts.JobID)
				s.drainCause = "job ended (Slurm)"
				return s.drain()
			}
		}
	}
}

// endWillCome reports whether the node itself will end this supervisor:
// the slurmd that ran the prolog still runs (it runs the epilog) and the
// job's end time, when known, is not long past. Then Slurm is not asked.
func (s *supervisor) endWillCome() bool {
	if s.opt.SlurmdAlive == nil || !s.opt.SlurmdAlive() {
		return false
	}
	return s.opt.JobEnd.IsZero() || time.Now().Before(s.opt.JobEnd.Add(JobEndGrace))
}

// pollSelf reads the collector's counters: when spans last arrived (the
// drain waits for their span metrics) and the backend's refusals.
func (s *supervisor) pollSelf() {
	// The phase spans' count is read before and after the counters: an
	// export that ends between the two would otherwise read as spans
	// of the job's own (the counters without them, the count with).
	phaseSpans, busyBefore := s.phaseSpansSent()
	m, err := selfmetrics.Scrape(s.ports.Telemetry)
	if err != nil {
		return
	}
	phaseSpansAfter, busyAfter := s.phaseSpansSent()
	busy := busyBefore || busyAfter || phaseSpansAfter != phaseSpans
	if c := counts(m, "metrics"); c.Received > 0 && (s.lastRead == nil || counts(s.lastRead, "metrics").Received == 0) {
		// Once per collector run: from here on a receipt made from the
		// last read (the run killed) has figures.
		s.log.Infof("collector run %d: counters read, %d metric points received so far", s.runs+1, c.Received)
	}
	s.lastRead, s.lastReadAt = m, time.Now()
	if n := m.Sum(selfmetrics.ReceiverAccepted, "traces") - phaseSpans; n != s.lastSpans && !busy {
		s.lastSpans, s.spansAt = n, time.Now()
	}
	all := s.figures.Add(m)
	if !s.writeFailSeen {
		for _, sig := range s.signals() {
			if n := counts(all, sig).WriteFailed; n > 0 {
				// Once per supervisor: the drain says how many in all.
				s.writeFailSeen = true
				s.log.Warnf("the collector cannot write the job's files: %d %s not written to %s.jsonl so far: %s; the backend still gets them, the receipt will count them",
					n, selfmetrics.Words(sig), sig, writeTrouble(s.base(), s.out, "now"))
				break
			}
		}
	}
	if p := problems(all, s.signals(), "the file system refused the writes"); p != "" && p != s.problems {
		s.problems = p
		s.writeState(launch.StatusReady, "")
	}
}

// restart starts the collector again on the same ports, appending to the
// same files, up to MaxRestarts times.
func (s *supervisor) restart(ctx context.Context) error {
	tail := tailFile(s.logPath, 5)
	if s.restarts >= s.opt.MaxRestarts {
		s.endRun(nil, fmt.Sprintf("collector run %d exited unexpectedly (%v)", s.runs+1, s.coll.Err()))
		return fmt.Errorf("the collector died %d times; giving up. Last lines of %s:\n%s", s.restarts+1, s.logName(), tail)
	}
	s.endRun(nil, fmt.Sprintf("collector run %d exited unexpectedly (%v)", s.runs+1, s.coll.Err()))
	s.restarts++
	s.lastSpans = 0 // the new collector counts from zero
	s.log.Warnf("the collector exited unexpectedly (%v); restart %d of %d on the same ports", s.coll.Err(), s.restarts, s.opt.MaxRestarts)
	appendLog(s.logPath, fmt.Sprintf("gym-otel: the collector exited unexpectedly (%v); restart %d of %d", s.coll.Err(), s.restarts, s.opt.MaxRestarts))
	s.cutPartialLines()
	s.newRunBase()
	// The same held dir and configuration.
	failed, err := s.startRun(ctx, s.pol.HealthWait, nil)
	switch {
	case err == nil:
		s.writeState(launch.StatusReady, "")
		return nil
	case failed == startHealth && errors.Is(err, errExited):
		return s.restart(ctx)
	case failed == startProof:
		// The ports were free while the collector was down: another
		// user may hold one now and answer the health check. The tasks'
		// env names these ports, so new ones cannot help: give up (the
		// supervisor exits, and the steps that start from now on, seeing
		// it gone, set no env).
		s.endRun(nil, fmt.Sprintf("collector run %d was stopped: after restart %d %v", s.runs+1, s.restarts, err))
		return fmt.Errorf("after restart %d of the collector: %w; giving up (the job's later steps get no collector env on this node)", s.restarts, err)
	}
	return err
}

// cutPartialLines truncates each jsonl file back to its last complete line.
// A collector killed mid-write leaves half a batch at the end; the restarted
// one appends, and the half line would glue onto its first line, making a
// line that does not parse. The half batch is lost either way.
func (s *supervisor) cutPartialLines() {
	for _, sig := range []string{"metrics", "traces", "logs"} {
		path, name := s.path(jobdir.SignalFile(sig)), filepath.Join(s.out, jobdir.SignalFile(sig))
		size, keep, err := completeLength(path)
		if err != nil || keep == size {
			continue
		}
		if err := os.Truncate(path, keep); err != nil {
			s.log.Warnf("%s: cutting the partial last line: %v", name, unwrapPath(err))
			continue
		}
		appendLog(s.logPath, fmt.Sprintf("gym-otel: removed a partial last line (%d bytes) from %s left by the collector's exit", size-keep, name))
	}
}

// completeLength returns the size of path and the length of its complete
// lines (up to and including the last newline), reading backwards from the
// end in 64 KiB chunks (the files can be large).
func completeLength(path string) (size, keep int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	size = fi.Size()
	buf := make([]byte, 64*1024)
	for end := size; end > 0; {
		n := min(int64(len(buf)), end)
		if _, err := f.ReadAt(buf[:n], end-n); err != nil {
			return size, size, err
		}
		if i := strings.LastIndexByte(string(buf[:n]), '\n'); i >= 0 {
			return size, end - n + int64(i) + 1, nil
		}
		end -= n
	}
	return size, 0, nil
}

// drain reads the backend counters, stops the collector within
// shutdown_timeout_seconds, appends what ends after it (the drain's spans,
// the span metrics the connector did not export: spancount.go) and reports
// what the backend refused.
func (s *supervisor) drain() error {
	drainStart := time.Now()
	s.writeState(jobdir.StatusDraining, "")
	s.endPhases()
	s.pollSelf()
	// The span metrics of the last spans are counted from the files
	// after the collector's exit, unless the files are too large to read
	// within the drain: then the connector's flushes are waited for.
	countAll := true
	if size := s.fileBytes("traces") + s.fileBytes("metrics"); size > s.opt.SpanCountMaxBytes {
		countAll = false
		// The last spans the collector took: the job's (the receiver's
		// counter, as pollSelf last saw it change) and the supervisor's
		// own phase spans, the node's root span among them, sent just
		// now.
		last := s.spansAt
		if p := s.phasesSentAt(); p.After(last) {
			last = p
		}
		// A new series is flushed as 0 first and with its count one
		// interval later: wait two intervals after the last spans.
		if wait := time.Until(last.Add(s.pol.SpanMetricsSettle)); !last.IsZero() && wait > 0 {
			s.log.Infof("traces.jsonl and metrics.jsonl hold %.1f MiB (more than the %.1f MiB read at the drain): waiting %v for the span metrics of the last spans",
				float64(size)/(1<<20), float64(s.opt.SpanCountMaxBytes)/(1<<20), wait.Round(time.Millisecond))
			time.Sleep(wait)
		}
		s.pollSelf()
	}
	// The last run ended at the final scrape (collGone) and is counted.
	clean, wasRunning, collectorExit := true, s.coll.Running(), time.Now()
	if !s.collGone {
		clean, wasRunning, collectorExit = s.stopRun(stopAtDrain)
	}
	s.trouble = ""
	for _, sig := range s.signals() {
		if counts(s.figures, sig).WriteFailed > 0 {
			s.trouble = writeTrouble(s.base(), s.out, "at the drain")
			break
		}
	}
	// The collector has exited: the reserve's room is for the receipt,
	// state.json and the last log lines.
	s.release()
	if s.trouble != "" {
		// A write that failed half-way leaves part of a line.
		s.cutPartialLines()
	}
	s.problems = problems(s.figures, s.signals(), s.trouble)
	if !clean {
		s.cutPartialLines() // before the drain's line: a killed collector's half line
	}
	// The delivery of the appended lines takes at most DeliveryBound out
	// of the SupervisorSlack of the epilog's wait (DrainWait), and less
	// when the count of the spans (or the settle) and the stop took more
	// than theirs.
	bound := min(timing.DeliveryBound, time.Until(drainStart.Add(s.pol.DrainWait-timing.SupervisorSlack+timing.DeliveryBound)))
	s.appendAfterCollector(drainEnd{start: drainStart, exit: collectorExit, cause: s.drainCause, exitKnown: wasRunning,
		killed: s.coll.killed, clean: clean}, bound, countAll)
	// With otel.delivery: files, the rest of the epilog's wait, less what
	// the receipt and the state need (SupervisorSlack - DeliveryBound), is
	// the files' delivery's.
	s.finishFileDelivery(time.Until(drainStart.Add(s.pol.DrainWait - timing.SupervisorSlack + timing.DeliveryBound)))
	s.writeReceipt()
	if p := s.problems; p != "" {
		appendLog(s.logPath, "gym-otel: "+p)
		s.log.Warn(p)
	} else if logShowsLoss(s.unknown, s.logPath) {
		s.problems = "the backend refused or dropped data (see collector.log); the local jsonl files are complete"
		appendLog(s.logPath, "gym-otel: "+s.problems)
	}
	if !clean && s.trouble == "" {
		s.cutPartialLines()
	}
	if !clean {
		var err error
		switch {
		case !wasRunning:
			err = fmt.Errorf("the collector had exited (%v) before the drain", s.coll.Err())
		case s.coll.killed:
			err = fmt.Errorf("the collector did not shut down within otel.shutdown_timeout_seconds (%ds) and was killed", s.o.ShutdownTimeoutSeconds)
		default:
			// In time, but its shutdown failed: a file exporter that
			// could not flush its last writes (a full file system),
			// counted in the receipt.
			err = fmt.Errorf("the collector's shutdown ended with an error (%v); see collector.log", s.coll.Err())
		}
		s.writeState(jobdir.StatusDrained, err.Error())
		return err
	}
	s.writeState(jobdir.StatusDrained, "")
	return nil
}

// logShowsLoss says whether the collector's log at logPath shows data the
// backend did not get that the figures cannot: only when some run's
// figures are unknown (unknown, one sentence each, is not empty). Final
// figures count every request lost after its retries or at shutdown (the
// exporter's send_failed is counted outside its retries), and a retry that
// then succeeded is no loss.
func logShowsLoss(unknown []string, logPath string) bool {
	return len(unknown) > 0 && strings.Contains(tailFile(logPath, 200), render.BackendExporter) && logHasExportFailure(logPath)
}

// logHasExportFailure says whether the collector's log at path has a
// line of the backend exporter's giving up on a request: the exporter
// helper's "Exporting failed. Dropping data." (its queue's consumer, after
// the retries or at shutdown) or "Exporting failed. Rejecting data."
// (without a queue). Its "Exporting failed. Will retry the request after
// interval." is not one: the request is sent again, and may arrive. False
// when the log cannot be read.
func logHasExportFailure(path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, render.BackendExporter) &&
			(strings.Contains(line, "Exporting failed. Dropping data") || strings.Contains(line, "Exporting failed. Rejecting data")) {
			return true
		}
	}
	return false
}

func (s *supervisor) writeState(status, errText string) {
	st := jobdir.State{
		Status: status, Error: errText, Ports: s.ports, SupervisorPID: os.Getpid(),
		Restarts: s.restarts, ExportProblems: s.problems, ForeignTargets: s.foreign, UpdatedAt: time.Now().UTC().Format(time.RFC3339Nano),
		JobID: s.opt.Facts.JobID, RestartCount: s.opt.Facts.RestartCount, SLUID: s.opt.Facts.SLUID,
		GPUs: s.opt.Facts.GPUPCI,
	}
	if s.coll != nil && s.coll.Running() {
		st.CollectorPID = s.coll.pid
	}
	if s.base() == "" {
		return // the output dir is not held: nothing is written there
	}
	if err := jobdir.WriteState(s.base(), st); err != nil {
		s.log.Debugf("%s: %v", jobdir.StateFile, err)
	}
}

func appendLog(path, line string) {
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %s\n", time.Now().UTC().Format(time.RFC3339Nano), line)
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// squeueRunning asks Slurm (helper/slurm: squeue, timing.LivenessQueryBound) whether the
// job may still run: known and not in a final state. No answer is an
// error, which changes nothing.
func squeueRunning(ctx context.Context, jobID string) (bool, error) {
	id, err := slurm.ParseJobID(jobID)
	if err != nil {
		return true, err
	}
	ctx, cancel := context.WithTimeout(ctx, timing.LivenessQueryBound)
	defer cancel()
	j, known, err := slurm.Query(ctx, id)
	if err != nil {
		return true, err
	}
	return known && !slurm.Final(j.State), nil
}
