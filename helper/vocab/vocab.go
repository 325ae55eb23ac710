// Package vocab is the plugin's own telemetry vocabulary: the names of the
// job's Slurm phase spans and the keys of their attributes, the metric
// families of the job's cgroups (the supervisor's readings), their
// labels and what keeps them, and the energy of the job's GPUs per step.
// The supervisor writes them (helper/supervise, helper/cgroup), inspect
// reads them (helper/inspect), the test kit checks them (internal/slurmkit,
// internal/jobgen), and the docs are checked against them (vocab's tests:
// the user guide's tables, and every such name the docs write); a rename
// here is a rename everywhere. The marks that tell the plugin's telling
// apart (gym_otel.source, nemo.lens.emitter, the phase scope) are shared
// with C and live in helper/contract. A leaf: it imports nothing of the
// module.
package vocab

// The job's Slurm phases, one span each per node (the step spans per step,
// up to the supervisor's cap, the rest in SpanStepsAggregated).
const (
	SpanJob             = "slurm.job"              // the node's whole job, the root
	SpanQueueWait       = "slurm.queue_wait"       // from the submit to the start (the first node)
	SpanProlog          = "slurm.prolog"           // the job prolog, to the collector's readiness
	SpanStep            = "slurm.step"             // one step on the node
	SpanBatchScript     = "slurm.batch_script"     // the batch script's run, inside the batch step
	SpanFinalWait       = "slurm.final_wait"       // the batch step's wait for the final scrape
	SpanStepsAggregated = "slurm.steps.aggregated" // the steps past the cap, folded
	SpanEpilog          = "slurm.epilog"           // the job epilog, from its start
	SpanDrain           = "slurm.drain"            // the collector's stop
)

// Spans is every phase span name, in the order of a job's life.
var Spans = []string{SpanJob, SpanQueueWait, SpanProlog, SpanStep, SpanBatchScript, SpanFinalWait, SpanStepsAggregated, SpanEpilog, SpanDrain}

// The phase spans' attributes.
const (
	AttrNode          = "slurm.node"           // string: the node (every phase span)
	AttrJobID         = "slurm.job.id"         // string: the job id (SpanJob)
	AttrStartKnown    = "slurm.start_known"    // bool: the start is measured, not taken from a later moment
	AttrEndKnown      = "slurm.end_known"      // bool: the end is measured
	AttrTimePrecision = "slurm.time_precision" // string: "1s" where Slurm keeps whole seconds
	AttrQueueUnknown  = "slurm.queue_wait.unknown"
	// AttrPrologSupervisorStart (Int, unix ns) is when the prolog started
	// the supervisor (SpanProlog).
	AttrPrologSupervisorStart = "slurm.prolog.supervisor_start_unix_nano"

	AttrStepID       = "slurm.step.id"        // string: "batch", "extern", "0", ...
	AttrStepTasks    = "slurm.step.tasks"     // Int: the step's tasks on the node
	AttrStepExitCode = "slurm.step.exit_code" // Int
	AttrStepSignal   = "slurm.step.signal"    // Int

	AttrStepsCount         = "slurm.steps.count" // Int: steps folded (SpanStepsAggregated)
	AttrStepsFailed        = "slurm.steps.failed"
	AttrStepsWorstExitCode = "slurm.steps.worst_exit_code"
	AttrStepsTotalMs       = "slurm.steps.total_ms"
	AttrStepsKept          = "slurm.steps.kept"
	AttrStepsUntracked     = "slurm.steps.untracked"

	AttrJobExitCode        = "slurm.job.exit_code" // Int, from the job epilog's environment (SpanEpilog)
	AttrJobSignal          = "slurm.job.signal"
	AttrJobDerivedExitCode = "slurm.job.derived_exit_code"
	AttrJobDerivedSignal   = "slurm.job.derived_signal"
	AttrJobExitFrom        = "slurm.job.exit_from" // string: where the exit code was read

	AttrDrainCause           = "slurm.drain.cause" // string: what stopped the collector
	AttrDrainClean           = "slurm.drain.clean" // bool: it stopped within its bound, without error
	AttrDrainCollectorKilled = "slurm.drain.collector_killed"
)

// The metric families of the job's cgroups, pushed by the supervisor to
// the collector (OTLP; helper/supervise's cgroupmetrics.go gives each its
// type and help), read by inspect.
const (
	CgroupCPUSeconds         = "cgroup_cpu_usage_seconds_total"
	CgroupCPUPeriods         = "cgroup_cpu_periods_total"
	CgroupThrottledPeriods   = "cgroup_cpu_throttled_periods_total"
	CgroupThrottledSeconds   = "cgroup_cpu_throttled_seconds_total"
	CgroupMemoryCurrent      = "cgroup_memory_current_bytes"
	CgroupMemoryPeak         = "cgroup_memory_peak_bytes"
	CgroupMemoryLimit        = "cgroup_memory_limit_bytes"
	CgroupOOMKills           = "cgroup_oom_kills_total"
	CgroupCPUPressureSome    = "cgroup_cpu_pressure_some_seconds_total"
	CgroupCPUPressureFull    = "cgroup_cpu_pressure_full_seconds_total"
	CgroupMemoryPressureSome = "cgroup_memory_pressure_some_seconds_total"
	CgroupMemoryPressureFull = "cgroup_memory_pressure_full_seconds_total"
	CgroupIOPressureSome     = "cgroup_io_pressure_some_seconds_total"
	CgroupIOPressureFull     = "cgroup_io_pressure_full_seconds_total"
	CgroupNotKept            = "cgroup_not_kept" // what is not kept, and why
)

// CgroupMetricFamilies is every metric family of the cgroup readings with a
// figure, in the order served (CgroupNotKept, the series of what is not
// kept, is not among them).
var CgroupMetricFamilies = []string{CgroupCPUSeconds, CgroupCPUPeriods, CgroupThrottledPeriods, CgroupThrottledSeconds,
	CgroupMemoryCurrent, CgroupMemoryPeak, CgroupMemoryLimit, CgroupOOMKills,
	CgroupCPUPressureSome, CgroupCPUPressureFull, CgroupMemoryPressureSome, CgroupMemoryPressureFull, CgroupIOPressureSome, CgroupIOPressureFull}

// The producer of the node's readings and its series' labels.
const (
	// CgroupProducer is the service.name of the node's readings (the
	// job's cgroups, host energy and host power) that the supervisor
	// pushes to the collector, the service.name.override of their series
	// in the files.
	CgroupProducer = "cgroup"
	// CgroupPrefix begins the name of every cgroup metric family.
	CgroupPrefix = "cgroup_"

	// LabelCgroup names the group of a series: CgroupJob, CgroupStep or
	// CgroupCollector.
	LabelCgroup = "cgroup"
	// LabelStep is a step group's step id ("batch", "extern", "0", ...);
	// absent for a series that stands for step groups not read.
	LabelStep = "step"
	// LabelFamily (CgroupNotKept only) is the family not kept: one of
	// CgroupFamilies, or CgroupFamilyAll for a whole group.
	LabelFamily = "family"
	// LabelReason (CgroupNotKept only) is why, one sentence.
	LabelReason = "reason"

	CgroupJob       = "job"       // Slurm's group of the job on the node
	CgroupStep      = "step"      // a step's group, with LabelStep
	CgroupCollector = "collector" // the collector's own group
)

// CgroupLabels is every label of the cgroup series, in the order served.
var CgroupLabels = []string{LabelCgroup, LabelStep, LabelFamily, LabelReason}

// CgroupGroups is every value of LabelCgroup.
var CgroupGroups = []string{CgroupJob, CgroupStep, CgroupCollector}

// The cgroup families: the figures grouped by what keeps them (helper/cgroup
// reads them; a family not kept is one CgroupNotKept series, its
// LabelFamily one of these).
const (
	CgroupFamilyCPUUsage       = "cpu_usage"       // CgroupCPUSeconds
	CgroupFamilyCPUThrottling  = "cpu_throttling"  // CgroupCPUPeriods, CgroupThrottledPeriods, CgroupThrottledSeconds
	CgroupFamilyMemoryCurrent  = "memory_current"  // CgroupMemoryCurrent
	CgroupFamilyMemoryPeak     = "memory_peak"     // CgroupMemoryPeak
	CgroupFamilyOOMKills       = "oom_kills"       // CgroupOOMKills
	CgroupFamilyCPUPressure    = "cpu_pressure"    // CgroupCPUPressureSome, CgroupCPUPressureFull
	CgroupFamilyMemoryPressure = "memory_pressure" // CgroupMemoryPressureSome, CgroupMemoryPressureFull
	CgroupFamilyIOPressure     = "io_pressure"     // CgroupIOPressureSome, CgroupIOPressureFull
	// CgroupFamilyAll is LabelFamily of a group not there at all.
	CgroupFamilyAll = "all"
	// CgroupFamilyMemoryLimit is CgroupMemoryLimit's family: never not
	// kept (no bound is no reason), so not in CgroupFamilies.
	CgroupFamilyMemoryLimit = "memory_limit"
)

// CgroupFamilies is every family that can be not kept, in a stable order.
var CgroupFamilies = []string{CgroupFamilyCPUUsage, CgroupFamilyCPUThrottling, CgroupFamilyMemoryCurrent, CgroupFamilyMemoryPeak,
	CgroupFamilyOOMKills, CgroupFamilyCPUPressure, CgroupFamilyMemoryPressure, CgroupFamilyIOPressure}

// The energy of the job's GPUs per Slurm step, which the supervisor sends
// to the backend at the drain (helper/supervise's energymetrics.go, from
// inspect's figures): one gauge point per node and step.
const (
	// GPUEnergy is the measured energy of the job's GPUs on the node over
	// one step's window: a gauge in J, its start and time the window's
	// ends. Attributes: AttrStepID, AttrEnergyRole, AttrEnergySource,
	// AttrEnergyTrusted, AttrEnergyWhy. Only where the figure is known.
	GPUEnergy = "gym_otel.gpu.energy"
	// GPUEnergyEstimate is the estimate given where GPUEnergy is refused
	// because the GPUs are MIG instances of the job's own (J; the same
	// attributes, and AttrEnergyMethod).
	GPUEnergyEstimate = "gym_otel.gpu.energy.estimate"

	// AttrEnergyRole (string) is the Gym roles the node's model servers
	// serve, comma separated ("" none).
	AttrEnergyRole = "gym.role"
	// AttrEnergySource (string) is "counter", "power" or "counter+power".
	AttrEnergySource = "gym_otel.energy.source"
	// AttrEnergyTrusted (bool) is the verdict.
	AttrEnergyTrusted = "gym_otel.energy.trusted"
	// AttrEnergyWhy (string) is the verdict's reasons, "; " separated, ""
	// when trusted.
	AttrEnergyWhy = "gym_otel.energy.why"
	// AttrEnergyMethod (string, GPUEnergyEstimate only) is the estimate's
	// method and shares.
	AttrEnergyMethod = "gym_otel.energy.method"
)

// GPUEnergyMetrics is every GPU energy metric.
var GPUEnergyMetrics = []string{GPUEnergy, GPUEnergyEstimate}

// GPUEnergyAttrs is every attribute of the GPU energy points.
var GPUEnergyAttrs = []string{AttrStepID, AttrEnergyRole, AttrEnergySource, AttrEnergyTrusted, AttrEnergyWhy, AttrEnergyMethod}

// The node's host energy, pushed by the supervisor with the cgroups'
// readings where root handed it the node's RAPL counters (plugstack
// host_power=rapl; helper/supervise's hostenergy.go), read by inspect.
const (
	// HostEnergyJoules is a counter per RAPL zone (label zone: package-0,
	// package-0/dram, psys, ...), J since the supervisor's first read:
	// the node's energy, not the job's.
	HostEnergyJoules = "gym_otel_host_energy_joules_total"
	// HostEnergyWraps counts the zone counter's wraps the sum carries.
	HostEnergyWraps = "gym_otel_host_energy_wraps_total"
	// HostEnergyStart is a gauge per zone: when its sum began (the
	// supervisor's first read of the zone, s since the epoch), at which
	// the sum was 0.
	HostEnergyStart = "gym_otel_host_energy_start_time_seconds"
)

// The node's host power from hwmon, pushed by the supervisor with the
// cgroups' readings where the plugstack chose it (host_power=hwmon, or
// auto on a node without RAPL; helper/supervise's hwmon.go), read by
// inspect.
const (
	// HostPowerWatts is a gauge per hwmon power sensor of the node's
	// power meter (labels chip: the chip's name, power_meter; hwmon: its
	// class directory, hwmon0; sensor: power1), W, read at each reading
	// from powerM_average (else powerM_input): the node's power, not the
	// job's.
	HostPowerWatts = "gym_otel_host_power_watts"
)
