package supervise

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/gpudev"
	"github.com/gym-otel-spank/gym-otel-spank/helper/heldir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/helper/selfmetrics"
	"github.com/gym-otel-spank/gym-otel-spank/helper/timing"
)

// Defaults of Options.
const (
	// DefaultHealthPoll is how often the health endpoint is polled at
	// start where the collector's log cannot tell its readiness
	// (waitHealthy): its granularity adds to every such start, and a
	// refused loopback connect costs microseconds.
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
	// Early is the host collector this process exec'd at its start
	// (WatchEarlyCollector), or nil: the first run hands it its run
	// instead of exec'ing one, where the run's argv is the one it was
	// exec'd with.
	Early *EarlyCollector
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
	// (InheritedEnergyZones; plugstack host_power=rapl): summed, pushed
	// with the node's readings (hostenergy.go) and closed at the end. nil: no
	// host energy.
	HostEnergy []launch.EnergyZone
	// HostHwmon: read the node's power meter under the hwmon class
	// (launch.EnvHostPower is launch.HostPowerHwmon: plugstack
	// host_power=hwmon, or auto without RAPL) and serve it on the cgroup
	// page (hwmon.go). Nothing is handed down: its files are
	// world-readable.
	HostHwmon bool
	// Gate is the read end of the gate the prolog handed down
	// (InheritedGate; launch.EnvGateFD): the start-up binds no port and
	// starts no collector until root writes launch.GateOpen on it, and
	// fails at its end without it. nil: no gate.
	Gate *os.File
	// ResumeGC, when not nil, turns the process's garbage collector on
	// again (PauseGC's result): called StartGCPause after the ready
	// report, or at the drain's start when that comes first.
	ResumeGC func()
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
	// configFile, when not nil, ends with the write of collector.yaml
	// for the host collector, made while the collector starts
	// (writeConfig, configFileDone).
	configFile chan error
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
	control    *controlServer       // answers the batch step's hold (nil: not started by the plugin)
	lastRead   selfmetrics.Counters // the running collector's last read counters
	lastReadAt time.Time
	figures    selfmetrics.Counters // the ended collector runs' counters, summed
	runs       int                  // collector runs ended (counted in figures)
	unknown    []string             // what the figures lack, one sentence each

	nodeMetrics     *nodeMetrics // the job's cgroups, host energy and power (nodemetrics.go; nil: none read)
	nodeMetricsStop func()

	phases     *phases // the job's Slurm phases as spans (phases.go)
	phasesStop func()
	phaseBase  int64 // phase spans exported to the ended collector runs
	// queueAsk asks for the queue wait QueueWaitDelay after the ready
	// report (the job's first node; nil elsewhere).
	queueAsk *time.Timer

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
		s.nodeMetrics.close()
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

// backendTokenInCollector reports whether the collector's configuration
// reads the backend token (otel.token_env): only its backend exporter
// (and, with otel.token_resource_attribute, its resource/backend_auth
// processor) does, rendered with otel.delivery: collector alone.
func (s *supervisor) backendTokenInCollector() bool {
	return s.o.CollectorDelivery() && s.o.TokenEnv != ""
}

// releaseStartPagesAt is when, after the ready report, the supervisor
// releases its start's pages of its binary (proc.ReleaseStartPages).
var releaseStartPagesAt = []time.Duration{2 * time.Second, 30 * time.Second}

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
