package supervise

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/atomicfile"
	"github.com/gym-otel-spank/gym-otel-spank/helper/heldir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/memory"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
)

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
	// The node's readings: the job's cgroups and the node's host energy
	// (hostenergy.go) or host power (hwmon.go), each alone where the
	// others are not there, pushed to the collector once it is ready
	// (nodemetrics.go).
	meter := newHostEnergyMeter(s.opt.HostEnergy, s.log.Warnf)
	var hw *hwmonPower
	if s.opt.HostHwmon {
		hw = newHwmonPower(hwmonRoot, s.log.Infof, s.log.Warnf)
	}
	cgr, err := newCgroupReader(s.opt.Facts)
	if err != nil {
		s.log.Warnf("the job's cgroup metrics are not read: the node's cgroup mounts: %v", err)
		cgr = nil
	}
	s.nodeMetrics = newNodeMetrics(cgr, meter, hw, s.opt.Facts.Node)
	// With a control socket the batch step asks for the final scrape at the
	// script's end: the first run scrapes every target as it stops. A
	// node without targets (the hold ends at once) has none to do.
	s.scrapeOnShutdown = s.opt.ControlListener != nil && len(render.Targets(render.Input{Resolved: s.opt.Resolved, Job: render.JobOf(s.opt.Resolved, s.opt.Facts)})) > 0
	// With root's ports the configuration is known before any bind: it
	// is rendered while root installs the packet filter, off the start's
	// path.
	var planned render.Ports
	if s.rootPorts() {
		s.ports = s.opt.Ports
		if err := s.writeConfig(); err != nil {
			return err
		}
		planned = s.ports
		s.steps.mark("config")
	}
	if s.opt.Gate != nil {
		// Root installs the job's packet filter meanwhile: none of its
		// ports is bound before the rules are in (launch.EnvGateFD).
		if err := awaitGate(ctx, s.opt.Gate); err != nil {
			return err
		}
		s.steps.mark("gate")
	}
	if s.final, err = newFinalSink(s.ptoken, s.opt.Ports.Final); err != nil {
		return s.portErr(fmt.Errorf("a loopback port for the collector's final figures: %w", err))
	}
	s.final.guard.setLog(s.log.Warnf)
	meter.run(time.Duration(s.o.ScrapeIntervalSeconds) * time.Second) // none without zones
	if s.opt.ControlListener != nil {
		// Started by the plugin, with the listener its prolog made: root's
		// steps tell their phases and the batch step asks how far the
		// scrapes are (controlsock.go). Without it the step waits its bound.
		s.control = newControlServer(s.opt.ControlListener)
	}
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
		if s.ports != planned { // planned is empty unless rendered before the gate
			if err := s.writeConfig(); err != nil {
				return err
			}
			s.steps.mark("config")
		}
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
		return nil
	}
	p, err := launch.FreePorts(5, nil)
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
	return nil
}

// configPath is collector.yaml for a file operation.
func (s *supervisor) configPath() string { return s.path(jobdir.ConfigFile) }

// maxConfigEnv bounds the configuration passed in the collector's
// environment: Linux refuses an environment string over 128 KiB
// (MAX_ARG_STRLEN); rendered configurations are 5 to 8 KiB.
const maxConfigEnv = 120 << 10

// writeConfig renders the collector's configuration for its next run
// and writes collector.yaml: for a container's collector, which reads
// that file, before it returns; for the host collector, which runs with
// its configuration by content (s.collectorYAML), beside the collector's
// start (configFileDone waits for it). An error is the render's, or the
// container's file's write.
func (s *supervisor) writeConfig() error {
	_ = s.configFileDone() // an earlier run's file, superseded
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
	if s.o.Container != "" {
		y, err := render.Render(in)
		if err != nil {
			return err
		}
		if err := atomicfile.Write(s.configPath(), y, 0o600); err != nil {
			return err
		}
		s.launchArgs = s.launchCmd()
		return nil
	}
	held := in
	held.FilesAt = heldir.ChildAt(0)
	var err error
	if s.collectorYAML, err = render.Render(held); err != nil {
		return err
	}
	if len(s.collectorYAML) > maxConfigEnv {
		return fmt.Errorf("the collector's configuration is %d KiB, more than its environment can hold (%d KiB): fewer model services or scrape targets", len(s.collectorYAML)>>10, maxConfigEnv>>10)
	}
	// collector.yaml, the same by content with the real paths, is read
	// by none of the collector's start: it is made while the collector
	// starts, off the job's start.
	done := make(chan error, 1)
	s.configFile = done
	path := s.configPath()
	go func() {
		y, err := render.Render(in)
		if err == nil {
			err = atomicfile.Write(path, y, 0o600)
		}
		done <- err
	}()
	s.launchArgs = s.launchCmd()
	return nil
}

// configFileDone waits for the write of collector.yaml that writeConfig
// began for the host collector, if one is under way, and returns its
// error.
func (s *supervisor) configFileDone() error {
	if s.configFile == nil {
		return nil
	}
	err := <-s.configFile
	s.configFile = nil
	if err != nil {
		return fmt.Errorf("writing %s: %w", jobdir.ConfigFile, err)
	}
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

// launch starts the collector and waits until it is healthy.
func (s *supervisor) launch(ctx context.Context) error {
	if s.launchArgs.err != nil {
		return s.launchArgs.err
	}
	argv := s.launchArgs.argv
	logStart := s.logSize() // where this run's lines begin in the log
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
	case failed == startFile:
		return err
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
