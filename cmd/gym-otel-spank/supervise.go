package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
	"github.com/gym-otel-spank/gym-otel-spank/helper/supervise"
)

// Environment of `supervise --from-env`, set by the plugin's prolog.
const (
	envEncoded = launch.EnvEncoded
	envFacts   = launch.EnvFacts
	envRecord  = launch.EnvRecord
	// envRecordPoll optionally overrides how often the record's presence is
	// checked (a Go duration such as "200ms"; default
	// supervise.DefaultRecordPoll). A test hook for the liveness check.
	envRecordPoll = "GYM_OTEL_RECORD_POLL"
	// envFirstPorts optionally sets supervise.Options.FirstPorts
	// ("grpc,http,health,telemetry"). A test hook for a port squatter.
	envFirstPorts = "GYM_OTEL_FIRST_PORTS"
	// envSpanCountMaxBytes optionally sets
	// supervise.Options.SpanCountMaxBytes (bytes; default
	// supervise.SpanCountMaxBytes, 128 MiB). A test hook for the drain
	// of files too large to count.
	envSpanCountMaxBytes = "GYM_OTEL_SPAN_COUNT_MAX_BYTES"
	// envNvidiaProc optionally sets supervise.Options.NvidiaRoot (default
	// /proc/driver/nvidia). A test hook for a node's GPUs by device: the
	// plugin's prolog sets it only in the tests' build of the core.
	envNvidiaProc = launch.EnvNvidiaProc
)

func init() {
	commands["supervise"] = command{"run one job's collector on this node until SIGTERM (started by the plugin's prolog)", runSupervise}
}

func runSupervise(args []string, stdout, stderr io.Writer) error {
	mainStart := time.Now()
	// First of all: not dumpable, so that the job's tasks, which run as
	// the same user, cannot read this process's memory or environment nor
	// take its descriptors (the control socket's listener at fd 4, the
	// plugin's token it mints). The kernel resets the flag at every
	// execve, so it is set again after ClearSignals' re-exec, where this
	// line runs again; an execute-only install (mode 0711) has the kernel
	// set it at the execve itself, before any instruction of this program.
	notDumpableErr := proc.NotDumpable()
	// No garbage collection until the collector is ready and Slurm has
	// launched the job's first step: a few MiB of one-off start-up
	// garbage (supervise.PauseGC, resumed by Run; a start that fails
	// before it ends the process).
	resumeGC := supervise.PauseGC()
	fs := newFlags("supervise", "--from-env | [--plugstack FILE] [--site FILE] [--site-item KEY=VALUE...] [--config FILE] [--spec SPEC] --job-id ID [--node NAME] [--node-index N] [--output DIR] [--user NAME] [--record PATH] [--gpus LIST] [--gpu-devices LIST]", stderr)
	fromEnv := fs.Bool("from-env", false, "read the encoded settings from $"+envEncoded+", the job facts from $"+envFacts+", the record from $"+envRecord+", report on fd 3 and serve the control socket's listener on fd 4 (how the plugin's prolog starts it)")
	var in inputFlags
	in.register(fs)
	jobID := fs.String("job-id", "", "Slurm job `ID`")
	node := fs.String("node", "", "node `NAME` (default: this host's name)")
	nodeIndex := fs.Int("node-index", 0, "the node's position `N` in the job's node list")
	output := fs.String("output", "", "output `DIR` (default: <job dir>/otel or otel/nodes/<node>)")
	userName := fs.String("user", "", "when started as root, become this `USER` first")
	record := fs.String("record", "", "drain when this `PATH` disappears (the job has ended)")
	gpus := fs.String("gpus", "", "the job's GPU indexes on the node, as SLURM_JOB_GPUS (`LIST`; default: none named, every GPU kept)")
	devices := fs.String("gpu-devices", "", "the job's GPU devices on the node, as CUDA_VISIBLE_DEVICES in the prolog (`LIST`)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// Before anything else: a clean signal mask for us and the collector,
	// the job's user, no core dumps.
	runtime.LockOSThread() // the collector's Pdeathsig follows this thread
	if err := proc.LowerToNodeLimits(); err != nil {
		logrus.Warnf("resource limits: %v", err)
	}
	if err := proc.ClearSignals(); err != nil {
		logrus.Warnf("signals: %v", err)
	}
	// The control socket's listener, when whoever started this process handed
	// one on (the plugin's prolog, or a test): taken once ClearSignals has
	// re-executed this program where it had to (a slurmd started with
	// ignored signals passes them on), which keeps the inherited
	// descriptor only while it is not yet taken (the listener's copy is
	// close-on-exec), and before this process starts anything that could
	// inherit it.
	hold, holdErr := supervise.InheritedControlListener()
	// The collector this process's start exec'd (early.c), watched from
	// here: nothing has waited for a child yet.
	early, earlyErr := takeEarlyCollector()
	// The node's RAPL counters root opened and handed down (plugstack
	// host_power=rapl), taken likewise: read through these descriptors
	// only, never reopened by path.
	energy, energyErr := supervise.InheritedEnergyZones(os.Getenv(launch.EnvHostEnergy))
	os.Unsetenv(launch.EnvHostEnergy)
	// The gate root opens once the job's packet filter is in (its ports
	// are bound only then), taken likewise.
	gate, gateErr := supervise.InheritedGate(os.Getenv(launch.EnvGateFD))
	os.Unsetenv(launch.EnvGateFD)
	// The node's hwmon power meter, where the prolog chose it: read by
	// path, as this process's user (its files are world-readable).
	hostHwmon := os.Getenv(launch.EnvHostPower) == launch.HostPowerHwmon
	os.Unsetenv(launch.EnvHostPower)
	if *userName != "" {
		if early != nil {
			// Exec'd as this process's user, not the one it becomes.
			early.Abandon()
			early = nil
		}
		if err := proc.BecomeUser(*userName); err != nil {
			return err
		}
	}
	syscall.Umask(0o077) // traces and logs hold prompts
	if err := proc.BecomeSubreaper(); err != nil {
		logrus.Warnf("subreaper: %v", err)
	}
	if err := proc.NoCoreDumps(); err != nil {
		logrus.Warnf("core dumps: %v", err)
	}
	if notDumpableErr != nil {
		logrus.Warnf("not dumpable: %v (the job's tasks can read this process's memory)", notDumpableErr)
	}
	if earlyErr != nil {
		logrus.Warnf("%v (the collector is exec'd when its run starts)", earlyErr)
	}
	opt := supervise.Options{MainStart: mainStart, Early: early, ControlListener: hold, HostEnergy: energy, HostHwmon: hostHwmon, Gate: gate,
		ResumeGC: resumeGC}
	// reportFailed reports a start that ends before the supervisor runs
	// (on the readiness channel, once there is one) and returns err.
	reportFailed := func(err error) error {
		if opt.Readiness != nil {
			launch.WriteReadiness(opt.Readiness, launch.Readiness{Status: launch.StatusFailed, Error: err.Error(), SupervisorPID: os.Getpid()})
		}
		return err
	}
	if energyErr != nil {
		logrus.Warnf("host energy: %v", energyErr)
	}
	if holdErr != nil {
		logrus.Warnf("no control socket (the batch step waits its full bound): %v", holdErr)
	}
	if *fromEnv {
		var st syscall.Stat_t
		if syscall.Fstat(launch.ReadinessFD, &st) == nil {
			// The report channel reaches this process only: never the
			// collector or anything else it starts.
			syscall.CloseOnExec(launch.ReadinessFD)
			opt.Readiness = os.NewFile(launch.ReadinessFD, "report")
		}
		opt.LogToOutputDir = true
		if err := optionsFromEnv(&opt); err != nil {
			return reportFailed(err)
		}
	} else {
		resolved, _, _, err := in.resolveJob(stderr, true)
		if err != nil {
			return err
		}
		if *jobID == "" {
			return usageError{"--job-id is required (or --from-env)"}
		}
		opt.Resolved, opt.RecordPath, opt.OutputDir = resolved, *record, *output
		opt.Facts = jobfacts.Facts{JobID: *jobID, Node: *node, NodeIndex: *nodeIndex, Cluster: os.Getenv("SLURM_CLUSTER_NAME"),
			GPUs: jobfacts.ParseGPUs(*gpus), GPUDevices: jobfacts.ParseGPUDevices(*devices)}
		if opt.Facts.Node == "" {
			opt.Facts.Node, _ = os.Hostname()
		}
		if u := os.Getenv("USER"); u != "" {
			opt.Facts.User = u
		}
		opt.Readiness = stdout
	}
	if gateErr != nil {
		// Root's gate handed down but not usable: no port is bound
		// without it.
		return reportFailed(gateErr)
	}
	if err := takeToken(&opt); err != nil {
		return err
	}
	if err := takeRootChoices(&opt); err != nil {
		return reportFailed(err)
	}
	if v := os.Getenv(envRecordPoll); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("%s: %q is not a positive duration", envRecordPoll, v)
		}
		opt.RecordPoll = d
	}
	if v := os.Getenv(envFirstPorts); v != "" {
		for _, f := range strings.Split(v, ",") {
			p, err := strconv.Atoi(f)
			if err != nil || p < 1 || p > 65535 {
				return fmt.Errorf("%s: %q is not a list of ports", envFirstPorts, v)
			}
			opt.FirstPorts = append(opt.FirstPorts, p)
		}
	}
	if v := os.Getenv(envSpanCountMaxBytes); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("%s: %q is not a positive number of bytes", envSpanCountMaxBytes, v)
		}
		opt.SpanCountMaxBytes = n
	}
	if v := os.Getenv(envNvidiaProc); v != "" {
		if !filepath.IsAbs(v) {
			return fmt.Errorf("%s: %q is not an absolute path", envNvidiaProc, v)
		}
		opt.NvidiaRoot = v
	}
	return supervise.Run(context.Background(), opt)
}

// optionsFromEnv fills opt from the environment the plugin's prolog sets.
func optionsFromEnv(opt *supervise.Options) error {
	resolved, err := config.Decode(os.Getenv(envEncoded))
	if err != nil {
		return err
	}
	if _, err := resolved.Validate(nil); err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(os.Getenv(envFacts)), &opt.Facts); err != nil {
		return fmt.Errorf("%s: %w", envFacts, err)
	}
	opt.Resolved, opt.RecordPath = resolved, os.Getenv(envRecord)
	opt.SlurmdAlive = supervise.SlurmdAliveFunc(os.Getenv(launch.EnvSlurmd))
	opt.JobEnd = launch.ParseJobEnd(os.Getenv(launch.EnvJobEnd))
	slurmdExe := os.Getenv(launch.EnvSlurmdExe)
	opt.NewSlurmd = func() func() bool { return supervise.TheSlurmd(slurmdExe) }
	return takeToken(opt)
}

// takeToken moves the backend token from the environment into opt and the
// collector's environment. Unsetenv keeps it from any other child; the
// kernel's copy in /proc/<pid>/environ stays, readable by the job's user
// only, as the collector's is.
func takeToken(opt *supervise.Options) error {
	if !opt.Resolved.Otel.Enabled {
		return fmt.Errorf("otel.enabled is false for this job: nothing to supervise")
	}
	if opt.Token == "" {
		opt.Token = os.Getenv(opt.Resolved.Otel.TokenEnv)
	}
	if opt.Token == "" && opt.Resolved.Otel.RemoteExport() {
		return fmt.Errorf("otel.token_env: %s is empty in the supervisor's environment", opt.Resolved.Otel.TokenEnv)
	}
	os.Unsetenv(opt.Resolved.Otel.TokenEnv)
	return nil
}

// takeRootChoices moves root's choices into opt when its environment has
// them (the plugin's prolog sets both; a test may): the job's ports
// (launch.EnvPorts) and the receiver token (launch.EnvReceiverToken), which
// leaves the environment for the collector's alone. Errors: a value that
// is not what root writes, naming the variable.
func takeRootChoices(opt *supervise.Options) error {
	if v := os.Getenv(launch.EnvPorts); v != "" {
		p, err := launch.ParsePorts(v)
		if err != nil {
			return err
		}
		opt.Ports = p
	}
	if v := os.Getenv(launch.EnvReceiverToken); v != "" {
		if len(v) < 16 || strings.ContainsAny(v, " \t\n\r,=%$") {
			return fmt.Errorf("%s: not a receiver token (at least 16 characters, no blanks, commas, '=', '%%' or '$')", launch.EnvReceiverToken)
		}
		opt.ReceiverToken = v
		os.Unsetenv(launch.EnvReceiverToken)
	}
	return nil
}
