package supervise

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/heldir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/helper/timing"
)

// collector is one running collector process.
type collector struct {
	*proc.Child
	pid   int
	start uint64 // /proc/<pid>/stat starttime, clock ticks since boot
	// killed: stop's bound passed and the collector was killed.
	killed bool
}

// launchCmd is how to start the collector: argv and explicit environment.
type launchCmd struct {
	argv []string
	env  []string
	log  string // collector.log path (under the held dir's base path)
	// dir is the held output dir, inherited as descriptor 3 by a host
	// collector (the base of the paths of its files, heldir.ChildAt(0));
	// nil for a container runtime. The working dir is log's dir either
	// way: the held dir's base path, resolved by the child before exec.
	dir *heldir.Dir
	err error // why there is no argv (otel.container_runtime)
}

// commandFor builds the collector's argv: the host binary, or the container
// runtime template with its placeholders replaced. Placeholders, each
// replaced inside one argument (no shell is involved): {image} the
// otel.container image, {config} the collector.yaml path, {output} the
// output dir, {binary} otel.binary, {rundir} a private dir of this run on
// the node's local disk (rundir: "" when the template has none). An
// argument holding {envname} is
// repeated once per name of envNames, the name in its place
// ("--env={envname}": Podman and Enroot copy a variable named without a
// value from their own environment into the container): the collector's
// variables reach the container by name, their values never on the
// command line.
func commandFor(o config.Otel, configPath, outputDir, rundir string, envNames []string) ([]string, error) {
	if o.Container == "" {
		return []string{o.Binary, "--config", configPath}, nil
	}
	fields := strings.Fields(o.ContainerRuntime)
	if len(fields) == 0 {
		return nil, fmt.Errorf("otel.container_runtime is empty")
	}
	r := strings.NewReplacer("{image}", o.Container, "{config}", configPath, "{output}", outputDir, "{binary}", o.Binary, RunDirPlaceholder, rundir)
	argv := make([]string, 0, len(fields))
	for _, f := range fields {
		f = r.Replace(f)
		if !strings.Contains(f, EnvNamePlaceholder) {
			argv = append(argv, f)
			continue
		}
		for _, n := range envNames {
			argv = append(argv, strings.ReplaceAll(f, EnvNamePlaceholder, n))
		}
	}
	return argv, nil
}

// RunDirPlaceholder is the otel.container_runtime placeholder of a dir
// only the job's user can enter (0700, made with a random name under
// $TMPDIR, else /tmp, so on the node's local disk as a rule), made before
// the collector's first start and removed with everything in it at the
// supervisor's end: for a runtime's per-job state (Podman's
// XDG_RUNTIME_DIR, --root and --runroot; Enroot's ENROOT_RUNTIME_PATH and
// ENROOT_DATA_PATH), which must not be on NFS nor shared by two jobs.
const RunDirPlaceholder = "{rundir}"

// EnvNamePlaceholder is the otel.container_runtime placeholder an argument
// of which is repeated once per variable of the collector's environment
// that it needs inside the container, the variable's name in its place.
const EnvNamePlaceholder = "{envname}"

// ApptainerEnvPrefix is the prefix under which a container runtime's
// environment repeats each variable the collector needs: Apptainer (and
// Singularity, which reads APPTAINERENV_ too since Apptainer 1.0 took its
// place) sets APPTAINERENV_<NAME>=<value> of its own environment as
// <NAME>=<value> inside the container, --cleanenv or not.
const ApptainerEnvPrefix = "APPTAINERENV_"

// containerEnv is the environment of a container runtime: env (the
// collector's own, NAME=value lines) and, for each of names,
// APPTAINERENV_<NAME>=<value>. No value goes on a command line
// (/proc/<pid>/cmdline is world-readable).
func containerEnv(env, names []string) []string {
	out := append([]string{}, env...)
	for _, n := range names {
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, n+"="); ok {
				out = append(out, ApptainerEnvPrefix+n+"="+v)
				break
			}
		}
	}
	return out
}

// start starts the collector in its own session with stdout and stderr
// appended to the log, the held output dir as descriptor 3 and no other
// inherited descriptor, the signal mask and
// dispositions the supervisor itself has (cleared at its start, see
// ClearSignals), and exactly env as its environment. SIGTERM reaches it if
// the supervisor dies (Pdeathsig; the supervisor's main thread is locked).
func start(ls launchCmd) (*collector, error) {
	logf, err := openCollectorLog(ls.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	path := ls.argv[0]
	if !strings.Contains(path, "/") {
		if path, err = exec.LookPath(path); err != nil {
			return nil, err
		}
	}
	cmd := &exec.Cmd{
		Path:   path,
		Args:   ls.argv,
		Env:    ls.env,
		Stdout: logf,
		Stderr: logf,
		// The child changes to its working dir before exec closes the
		// supervisor's descriptors: /proc/self/fd/<n> of the held dir
		// still leads there.
		Dir: filepath.Dir(ls.log),
		SysProcAttr: &syscall.SysProcAttr{
			Setsid:    true,
			Pdeathsig: syscall.SIGTERM,
		},
	}
	if ls.dir != nil {
		cmd.ExtraFiles = []*os.File{ls.dir.File()}
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &collector{Child: proc.Watch(cmd), pid: cmd.Process.Pid}
	c.start, _ = proc.StartTime(c.pid)
	return c, nil
}

// openCollectorLog opens the collector's log, path, to append to (created
// 0600, not through a symbolic link).
func openCollectorLog(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("collector log %s: %w", path, err)
	}
	return f, nil
}

// stop sends SIGTERM to the collector's process group and waits up to bound
// until every process of the group is gone (a container runtime's collector
// may outlive the runtime process; the supervisor is their subreaper, see
// BecomeSubreaper); past the bound the group is SIGKILLed. It reports whether
// the stop was clean: the group gone within the bound, and the direct child
// exited 0 or by the SIGTERM it was sent.
func (c *collector) stop(bound time.Duration) (clean bool) {
	if !c.Running() {
		return c.Err() == nil
	}
	if c.StopGroup(bound, true) {
		c.killed = true
		return false
	}
	return c.Err() == nil || proc.TerminatedBy(c.Err(), syscall.SIGTERM)
}

// abandon stops a collector run the supervisor gives up on before it was
// taken into service, within timing.FailedStartStop.
func (c *collector) abandon() { c.stop(timing.FailedStartStop) }

// startStage is how far a collector run's start got when it failed
// (startRun).
type startStage int

const (
	startExec   startStage = iota // not started: the exec failed
	startHealth                   // started, not healthy (waitHealthy's error)
	startProof                    // healthy, a port not proven its own (provePorts' error)
	startFile                     // healthy and proven, collector.yaml not written (configFileDone's error)
)

// startRun is the start of every collector run (the first, a restart, the
// final scrape's next run): it starts the collector with s.launchArgs
// (start) and takes it as s.coll, waits until its health endpoint answers
// within ctx and, when bound is not 0, within bound of the start
// (waitHealthy: the log's ReadyLine, else a poll every Options.HealthPoll) and proves
// every port of the job its own (provePorts): whatever answers on a port
// is trusted with the job's telemetry and its receiver token. A run
// started but not healthy or not proven is abandoned (stopped within
// timing.FailedStartStop), as is one whose collector.yaml, written beside
// its start (writeConfig), could not be written (startFile). The error is
// the failed stage's, as its
// function returned it; failed tells the stage. steps, when not nil, is
// marked "exec" (the collector exec'd, or the early collector's answer to
// the hand-over: startCollector), "healthy" and "proof" (the first
// start's ready report).
func (s *supervisor) startRun(ctx context.Context, bound time.Duration, steps *stepTimes) (failed startStage, err error) {
	mark := func(name string) {
		if steps != nil {
			steps.mark(name)
		}
	}
	// collector.yaml, written beside the start (writeConfig): done by the
	// time the run is in service, or the run is not taken.
	defer func() {
		if ferr := s.configFileDone(); ferr != nil && err == nil {
			s.coll.abandon()
			failed, err = startFile, ferr
		}
	}()
	logFrom := s.logSize() // this run's first byte: waitHealthy reads from there
	c, err := s.startCollector(ctx)
	if err != nil {
		return startExec, err
	}
	s.coll = c
	mark("exec")
	if bound != 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, bound)
		defer cancel()
	}
	if err := waitHealthy(ctx, c.Exited(), s.ports.Health, s.opt.HealthPoll, s.logPath, logFrom); err != nil {
		c.abandon()
		return startHealth, err
	}
	mark("healthy")
	if err := s.provePorts(c); err != nil {
		c.abandon()
		return startProof, err
	}
	mark("proof")
	return 0, nil
}

// runStop names the moment a collector run in service is stopped (the
// final scrape's, the drain's) in the words of its account when it ended
// without its final figures.
type runStop struct {
	late      string // after "... (%ds)": " at the final scrape", or nothing
	killed    string // after "was killed (%v) ": "at the final scrape", "as the drain began"
	noFigures string // after "sent no final figures ": "at the final scrape", "at its shutdown"
	// exited, when not "", accounts a run that had exited before its
	// stop: "had exited (%v) <exited>".
	exited string
	// logStop logs "collector stopped in N ms (clean: true|false)" at the
	// stop.
	logStop bool
}

var (
	// stopAtFinalScrape is the stop of the final scrape (finalScrape).
	stopAtFinalScrape = runStop{late: " at the final scrape", killed: "at the final scrape", noFigures: "at the final scrape"}
	// stopAtDrain is the stop of the drain (drain).
	stopAtDrain = runStop{killed: "as the drain began", noFigures: "at its shutdown", exited: "before the drain", logStop: true}
)

// stopRun is the end of every collector run in service: it stops the
// running collector within otel.shutdown_timeout_seconds
// (pol.CollectorStop) and accounts for its run (endRun) with its final
// figures (finalSink), or with why there are none in at's words. It
// returns whether the stop was clean (stop), whether the collector still
// ran when the stop began, and when it had exited.
func (s *supervisor) stopRun(at runStop) (clean, wasRunning bool, exit time.Time) {
	start := time.Now()
	wasRunning = s.coll.Running()
	clean = s.coll.stop(s.pol.CollectorStop)
	if at.logStop {
		s.log.Infof("collector stopped in %d ms (clean: %v)", time.Since(start).Milliseconds(), clean)
	}
	exit = time.Now()
	final := s.final.since(start)
	switch {
	case at.exited != "" && !wasRunning:
		s.endRun(nil, fmt.Sprintf("collector run %d had exited (%v) %s", s.runs+1, s.coll.Err(), at.exited))
	case s.coll.killed:
		s.endRun(nil, fmt.Sprintf("collector run %d did not shut down within otel.shutdown_timeout_seconds (%ds)%s and was killed", s.runs+1, s.o.ShutdownTimeoutSeconds, at.late))
	case !clean && proc.TerminatedBy(s.coll.Err(), syscall.SIGKILL):
		// Killed by someone else (the OOM killer, a user) as the stop
		// began, before the supervisor saw it exit.
		s.endRun(nil, fmt.Sprintf("collector run %d was killed (%v) %s", s.runs+1, s.coll.Err(), at.killed))
	case final == nil:
		s.endRun(nil, fmt.Sprintf("collector run %d sent no final figures %s (see collector.log)", s.runs+1, at.noFigures))
	default:
		s.logFinalGain(final)
		s.endRun(final, "")
	}
	return clean, wasRunning, exit
}

var errExited = errors.New("the collector exited before it was healthy")

// logSize is the collector log's size in bytes (0 when it does not exist
// yet): where the next run's lines begin.
func (s *supervisor) logSize() int64 {
	if fi, err := os.Lstat(s.logPath); err == nil {
		return fi.Size()
	}
	return 0
}

// tailFile returns the last n lines of path ("" when unreadable).
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

var versionRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`version v?(\d+)\.(\d+)\.(\d+)`) })

// checkVersion runs `<binary> --version` within bound and refuses a
// collector older than render.MinCollectorVersion. The bound is the start's
// own (health_check_timeout_seconds): a loaded or slow node may take
// seconds to load a large binary, and the start as a whole is bounded
// anyway. Errors name otel.binary.
func checkVersion(ctx context.Context, binary string, env []string, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "--version")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, exec.ErrNotFound) {
			return fmt.Errorf("otel.binary: %s does not exist on this node", binary)
		}
		var pe *os.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("otel.binary: %s: %v", binary, pe.Err)
		}
		return fmt.Errorf("otel.binary: %s --version failed: %v: %s", binary, err, firstLine(out))
	}
	m := versionRE().FindSubmatch(out)
	if m == nil {
		return fmt.Errorf("otel.binary: %s --version printed no version: %s", binary, firstLine(out))
	}
	return versionAtLeast(binary, m[1:4])
}

// startedVersionRE is the collector's own line at its start, before any
// extension or receiver starts (otelcol's service, console or json
// encoding): `Starting <command>... {"Version": "0.161.0-gym1", ...}`.
var startedVersionRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`Starting [^ "]+\.\.\..*"[Vv]ersion": ?"v?(\d+)\.(\d+)\.(\d+)`)
})

// maxStartLogBytes bounds what loggedVersion reads of the collector's log.
const maxStartLogBytes = 256 << 10

// loggedVersion checks the version that the collector started at offset
// of its log (logPath) says of itself at its start, as checkVersion does
// with --version's output: found reports whether the line was there at
// all (within maxStartLogBytes); err is a version older than
// render.MinCollectorVersion.
func loggedVersion(binary, logPath string, offset int64) (found bool, err error) {
	f, err := os.Open(logPath)
	if err != nil {
		return false, nil
	}
	defer f.Close()
	b := make([]byte, maxStartLogBytes)
	n, _ := f.ReadAt(b, offset)
	m := startedVersionRE().FindSubmatch(b[:n])
	if m == nil {
		return false, nil
	}
	return true, versionAtLeast(binary, m[1:4])
}

// versionAtLeast refuses version m (major, minor, patch as decimal text)
// when it is older than render.MinCollectorVersion; the error names
// otel.binary.
func versionAtLeast(binary string, m [][]byte) error {
	have := [3]int{}
	for i := range have {
		have[i], _ = strconv.Atoi(string(m[i]))
	}
	var want [3]int
	fmt.Sscanf(render.MinCollectorVersion, "%d.%d.%d", &want[0], &want[1], &want[2])
	for i := range have {
		if have[i] != want[i] {
			if have[i] < want[i] {
				return fmt.Errorf("otel.binary: %s is version %d.%d.%d; gym-otel-spank needs %s or newer", binary, have[0], have[1], have[2], render.MinCollectorVersion)
			}
			break
		}
	}
	return nil
}

func firstLine(b []byte) string {
	s := bufio.NewScanner(bytes.NewReader(b))
	if s.Scan() {
		return s.Text()
	}
	return ""
}
