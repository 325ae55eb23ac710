// Package callbacks is the Go side of the gym_otel SPANK plugin's callbacks: what the C
// front (spank/) hands to the Go core (spank/core) at submit, in the job
// prolog and in the job epilog. It parses the plugstack.conf arguments,
// resolves and validates a job's settings at submit, starts the per-node
// supervisor as the job's user from the prolog and writes root's record that
// the steps read, and stops the supervisor from the epilog.
//
// Nothing here runs in a slurmstepd step process: the steps are pure C and
// only read the record (see record.Record).
package callbacks

import (
	"errors"
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/yamlnode"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
	"github.com/gym-otel-spank/gym-otel-spank/helper/portfilter"
)

// Defaults of the plugstack.conf arguments.
const (
	DefaultPrologTimeout = contract.DefaultPrologTimeout // seconds
	DefaultCLI           = "/usr/bin/gym-otel-spank"
	// DefaultCgroupMemoryMaxMiB is the site's cap on the collector
	// cgroup's memory bound (cgroup_memory_max_mib), MiB: 2 x the default
	// memory_limit_mib (512) with room for a collector twice that size.
	DefaultCgroupMemoryMaxMiB = 2048
	// MaxCgroupMemoryMaxMiB is the largest cgroup_memory_max_mib, MiB (1 TiB).
	MaxCgroupMemoryMaxMiB = 1 << 20
)

// ArgNames are the plugin's own plugstack.conf argument names (the rest are
// otel keys).
var ArgNames = []string{"site", "default", "prolog_timeout", "cli", "record_dir", "core", "cgroup", "cgroup_memory_max_mib", "port_filter", "job_output", "host_power", "collector_wait"}

// Args are the plugstack.conf arguments of the plugin:
//
//	site=PATH            the site file (YAML with an otel: block)
//	default=off|on       on: every job gets a collector unless --gym-otel=off
//	prolog_timeout=SECS  cap on the prolog's wait for the supervisor's report
//	                     (default 60; keep it below PrologEpilogTimeout)
//	cli=PATH             the gym-otel-spank CLI (default /usr/bin/gym-otel-spank)
//	record_dir=PATH      root's record dir (default /run/gym-otel)
//	core=PATH            the Go core (default: gym_otel_core.so beside gym_otel.so)
//	cgroup=auto|required|off  the collector's own cgroup (default auto: one
//	                     wherever a writable hierarchy is mounted, and no
//	                     collector there without it; a warning and none
//	                     only where none is mounted)
//	cgroup_memory_max_mib=MIB  the site's cap on the collector cgroup's
//	                     memory bound (default 2048, 32..1048576): the
//	                     bound is 2 x otel.memory_limit_mib, never above it
//	port_filter=auto|require|off  the node's packet filter that keeps the
//	                     job's loopback ports to the job (helper/portfilter;
//	                     default auto: wherever the node can, and a warning
//	                     once per node where it cannot; require: no
//	                     collector where it cannot)
//	job_output=on|off    on (default): a job's batch step names, at the
//	                     start of the job's output, where its telemetry is,
//	                     where it is shipped and the command that reads it
//	                     (spank/notice.c; read by C in the step, checked here)
//	host_power=off|rapl|hwmon|auto  off (default): no host power.
//	                     rapl: the prolog opens the node's RAPL energy
//	                     counters (root only since CVE-2020-8694)
//	                     read-only and hands them to the job's supervisor
//	                     (launch.OpenRAPL): it reopens the side channel the
//	                     CVE closed to the job's user, so only where the
//	                     site accepts that (nodes given to one job at a
//	                     time). hwmon: the supervisor reads the node's
//	                     ACPI power meter under the hwmon class itself
//	                     (launch.ScanHwmon; world-readable, nothing handed
//	                     down). auto: rapl where root finds a RAPL zone,
//	                     else hwmon
//	collector_wait=prolog|step  where a job waits for its collector's
//	                     start: prolog (default): the job prolog returns
//	                     once the collector is ready; step: the prolog
//	                     hands the start to a child of its own and
//	                     returns, Slurm launches the job's steps meanwhile,
//	                     and each step waits for root's record before its
//	                     tasks (spank/handoff.c; read by C, checked here)
//	<otel key>=VALUE     inline site overrides, e.g. on_failure=fail
type Args struct {
	Site          string
	DefaultOn     bool
	PrologTimeout int
	CLI           string
	RecordDir     string
	Core          string
	// Cgroup is CgroupAuto, CgroupRequired or CgroupOff.
	Cgroup string
	// CgroupMemoryMaxMiB caps the collector cgroup's memory bound, MiB.
	CgroupMemoryMaxMiB int
	// PortFilter is portfilter.ModeAuto, ModeRequire or ModeOff.
	PortFilter string
	// JobOutput (job_output=on|off, default on): whether the batch step
	// writes the telemetry line at the start of the job's output. The C
	// front reads it in the step (spank/args.c); the Go core only
	// validates it.
	JobOutput bool
	// HostPower is HostPowerOff, HostPowerRAPL, HostPowerHwmon or
	// HostPowerAuto (host_power=off|rapl|hwmon|auto, default off): whether
	// the prolog hands the job's supervisor the node's RAPL energy
	// counters, or has it read the node's hwmon power meter.
	HostPower string
	// CollectorWait is WaitProlog or WaitStep (collector_wait=, default
	// prolog): where a job waits for its collector's start. The C front
	// reads it in the prolog, the steps and the epilog (spank/args.c); the
	// Go core only validates it.
	CollectorWait string
	// SiteItems are the inline otel keys, in the order given.
	SiteItems []config.Item
}

// The values of host_power.
const (
	// HostPowerOff: the supervisor gets no host energy counter.
	HostPowerOff = "off"
	// HostPowerRAPL: the prolog opens the node's RAPL zones' energy_uj
	// (launch.OpenRAPL) and hands them to the supervisor read-only.
	HostPowerRAPL = "rapl"
	// HostPowerHwmon: the supervisor reads the node's ACPI power meter
	// under the hwmon class itself (launch.EnvHostPower; its files are
	// world-readable, so root hands nothing down).
	HostPowerHwmon = "hwmon"
	// HostPowerAuto: HostPowerRAPL where root finds a RAPL zone on the
	// node, else HostPowerHwmon (served where the node has a power meter).
	HostPowerAuto = "auto"
)

// The values of collector_wait.
const (
	// WaitProlog: the job prolog waits for the collector's readiness
	// (root's record ready or failed) before it returns.
	WaitProlog = "prolog"
	// WaitStep: the job prolog hands the start to a child and returns at
	// once; each step waits for root's record in its slurmstepd before its
	// tasks, so the collector starts while Slurm launches the step.
	WaitStep = "step"
)

// ParseArgs parses plugstack.conf arguments. Every bad argument is reported
// (joined), each naming the argument.
func ParseArgs(av []string) (Args, error) {
	a := Args{PrologTimeout: DefaultPrologTimeout, CLI: DefaultCLI, RecordDir: contract.DefaultRecordDir, Cgroup: CgroupAuto, CgroupMemoryMaxMiB: DefaultCgroupMemoryMaxMiB, PortFilter: portfilter.ModeAuto, JobOutput: true, HostPower: HostPowerOff, CollectorWait: WaitProlog}
	var errs []error
	bad := func(arg, format string, v ...any) {
		errs = append(errs, fmt.Errorf("plugstack.conf argument %q: %s", arg, fmt.Sprintf(format, v...)))
	}
	seen := map[string]bool{}
	for _, arg := range av {
		if arg == "" {
			continue
		}
		k, v, ok := strings.Cut(arg, "=")
		if !ok || !validArgKey(k) {
			bad(arg, "expected key=value (key: lower-case letters and _)")
			continue
		}
		if seen[k] {
			bad(arg, "%s given twice", k)
			continue
		}
		seen[k] = true
		switch k {
		case "site", "cli", "record_dir", "core":
			if !filepath.IsAbs(v) {
				bad(arg, "%s wants an absolute path", k)
				continue
			}
			v = filepath.Clean(v)
			switch k {
			case "site":
				a.Site = v
			case "cli":
				a.CLI = v
			case "record_dir":
				a.RecordDir = v
			case "core":
				a.Core = v
			}
		case "default":
			switch v {
			case "on":
				a.DefaultOn = true
			case "off":
				a.DefaultOn = false
			default:
				bad(arg, "default wants on or off")
			}
		case "job_output":
			switch v {
			case "on":
				a.JobOutput = true
			case "off":
				a.JobOutput = false
			default:
				bad(arg, "job_output wants on or off (off: no telemetry line in the jobs' output)")
			}
		case "collector_wait":
			switch v {
			case WaitProlog, WaitStep:
				a.CollectorWait = v
			default:
				bad(arg, "collector_wait wants prolog or step (step: the job's steps, not its prolog, wait for the collector's start)")
			}
		case "host_power":
			switch v {
			case HostPowerOff, HostPowerRAPL, HostPowerHwmon, HostPowerAuto:
				a.HostPower = v
			default:
				bad(arg, "host_power wants off, rapl, hwmon or auto (rapl: the job's user reads the node's RAPL energy counters, which CVE-2020-8694 restricted to root; hwmon: the node's ACPI power meter, world-readable; auto: rapl where the node has RAPL, else hwmon)")
			}
		case "cgroup":
			switch v {
			case CgroupAuto, CgroupRequired, CgroupOff:
				a.Cgroup = v
			default:
				bad(arg, "cgroup wants auto, required or off")
			}
		case "port_filter":
			m, err := portfilter.ParseMode(v)
			if err != nil {
				bad(arg, "%v", err)
				continue
			}
			a.PortFilter = m
		case "cgroup_memory_max_mib":
			n, err := strconv.Atoi(v)
			if err != nil || n < 32 || n > MaxCgroupMemoryMaxMiB {
				bad(arg, "cgroup_memory_max_mib wants whole MiB, 32..%d", MaxCgroupMemoryMaxMiB)
				continue
			}
			a.CgroupMemoryMaxMiB = n
		case "prolog_timeout":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 3600 {
				bad(arg, "prolog_timeout wants whole seconds, 1..3600")
				continue
			}
			a.PrologTimeout = n
		default:
			if !config.IsKey(k) {
				// Neither a plugin argument nor an otel key: suggest from
				// both, so prolog_timout points at prolog_timeout.
				if best, ok := yamlnode.Closest(k, append(append([]string{}, ArgNames...), config.Keys()...)); ok {
					bad(arg, "unknown argument (did you mean %q?)", best)
				} else {
					bad(arg, "unknown argument (plugin arguments: %s; otel keys: %s)",
						strings.Join(ArgNames, ", "), strings.Join(config.Keys(), ", "))
				}
				continue
			}
			a.SiteItems = append(a.SiteItems, config.Item{Key: k, Value: v})
		}
	}
	if len(a.SiteItems) > 0 {
		if _, err := config.ParseInline("plugstack.conf", a.SiteItems); err != nil {
			errs = append(errs, err)
		}
	}
	return a, errors.Join(errs...)
}

func validArgKey(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c == '_') {
			return false
		}
	}
	return true
}
