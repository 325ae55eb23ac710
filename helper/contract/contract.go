// Package contract holds the names and bounds the C front shares with the
// Go side (file names, environment names, the record's and the control
// socket's keys, bounds) and writes them into
// include/gym_otel_contract.h, so that the two cannot drift. It is a leaf:
// the Go packages that use a name import it from here. Regenerate the
// header with `go generate ./helper/contract`; TestHeaderCurrent fails
// while the committed header differs.
package contract

//go:generate go run ./gen ../../include/gym_otel_contract.h

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

const (
	// DefaultRecordDir is the default of the plugstack argument record_dir:
	// root's dir of the job records (helper/record).
	DefaultRecordDir = "/run/gym-otel"
	// RecordFile is the record's file name inside the job's record dir.
	RecordFile = "record"
	// ControlPathMax bounds the control socket's path in bytes (a unix socket's
	// sun_path, 108 bytes with its NUL): the prolog makes none longer
	// (helper/record's ControlSocketPath), and the steps take none longer
	// from root's record (spank/record.c).
	ControlPathMax = 107
	// MaxFinalWait bounds the batch step's final-scrape wait, below Slurm's
	// default UnkillableStepTimeout of 60 s. Whole seconds; the steps (C)
	// clamp the record's final_wait to it (helper/timing computes it).
	MaxFinalWait = 30 * time.Second
	// EnvInJob is the variable the steps of a --gym-otel job set in its
	// tasks (spank/step.c): the job id. A submit that sees it, with
	// SLURM_JOB_ID the same, is a nested sbatch from inside that job.
	EnvInJob = "GYM_OTEL_JOB"
	// JobControlSpec is the job-control variable the submit side (C,
	// spank_job_control_setenv) hands the encoded settings to the prolog in;
	// the prolog sees it with Slurm's SPANK_ prefix.
	JobControlSpec = "GYM_OTEL_SPEC"
	// JobControlToken is the job-control variable the submit side (C,
	// spank_job_control_setenv) hands the token to the prolog in; the
	// prolog sees it with Slurm's SPANK_ prefix.
	JobControlToken = "GYM_OTEL_TOKEN"
	// EnvPrologStart is the variable the job prolog (C, spank/prolog.c)
	// sets to its start (unix ms) before it loads the Go core, which hands
	// it on to the supervisor: the start of the prolog's phase span.
	EnvPrologStart = "GYM_OTEL_PROLOG_START_MS"
	// EnvEpilogStart is the variable the job epilog (C, spank/prolog.c)
	// sets to its start (unix ms) before it loads the Go core, which tells
	// it to the supervisor on its control socket before stopping it: the
	// start of the epilog's phase span.
	EnvEpilogStart = "GYM_OTEL_EPILOG_START_MS"
	// EnvSlurmdPID is the variable the job prolog (C, spank/prolog.c)
	// sets to its parent's pid, the slurmd that runs the prolog, before the
	// Go core runs: with collector_wait=step the core runs in a child that
	// its parent no longer waits for, whose own parent is not slurmd.
	EnvSlurmdPID = "GYM_OTEL_SLURMD_PID"
	// DefaultPrologTimeout is the plugstack argument prolog_timeout's
	// default, seconds: the bound of the prolog's start of the collector,
	// and with collector_wait=step of the steps' wait for it.
	DefaultPrologTimeout = 60
	// StartLockPrefix and StartLockSuffix name a job's start lock in the
	// node's record dir, <record_dir>/<node>/.start-<job id>.lock: with
	// collector_wait=step the job prolog makes it (root, 0600) and the
	// child that starts the collector holds an exclusive flock on it until
	// root's record is ready or failed; each step, and the epilog, wait
	// for that lock (spank/handoff.c). The prolog's sweep removes the
	// lock files of jobs that have no record dir and whose lock is free.
	StartLockPrefix = ".start-"
	StartLockSuffix = ".lock"
)

// PhaseScope is the instrumentation scope of the job's Slurm phase spans
// (the supervisor, helper/supervise, writes them; inspect tells them from
// the job's own spans by it).
const PhaseScope = "gym-otel-spank/slurm-phases"

// SourceKey is the resource attribute that marks what the plugin itself
// tells (the supervisor's Slurm phase spans and the job's cgroup series),
// with the value SourceSlurm. The node's collector stamps it in the
// pipelines of the supervisor's own receivers (the OTLP/HTTP receiver
// behind a token only the supervisor and the collector are given: its
// phase spans and its readings of the node) and deletes it from everything the job's tasks send, so
// inspect counts a phase or a cgroup series as Slurm's only when it
// carries it. A resource attribute, not a span or scope attribute: the
// collector's resource processor sets and deletes it without OTTL, it is
// on every item of the resource (spans, metric points, and the span
// metrics made from the spans), and the file and backend exporters keep
// it as is; a scope name or a span attribute is whatever the sender
// writes.
const SourceKey = "gym_otel.source"

// SourceSlurm is SourceKey's value on what the plugin itself tells.
const SourceSlurm = "slurm"

// EmitterKey is the resource attribute NeMo Lens names the emitter of
// Slurm envelope spans by: its reckoner (NVIDIA-NeMo/Lens pull request 22,
// tools/slurm_telemetry_reckoner.py at e1cb901) sets
// nemo.lens.emitter=slurm_reckoner on the spans it rebuilds from sacct,
// some of them under the names of the phase spans' (slurm.job,
// slurm.step). The supervisor sets EmitterPhases on the resource of its
// phase spans, so that a backend holding both tells them apart on Lens'
// own key and counts each phase once (docs/user-guide.md maps the names).
const EmitterKey = "nemo.lens.emitter"

// EmitterPhases is EmitterKey's value on the supervisor's phase spans.
const EmitterPhases = "gym_otel_spank"

// The keys of root's record (helper/record writes it, spank/record.c
// reads it in every step): one "key=value" line each.
const (
	RecordStatus          = "status"           // "starting", "ready" or "failed"
	RecordOnFailure       = "on_failure"       // "fail" or "continue"
	RecordReason          = "reason"           // why there is no collector, one line
	RecordFinalWait       = "final_wait"       // the batch step's hold, whole seconds
	RecordSupervisorPID   = "supervisor_pid"   // the job's supervisor on the node
	RecordSupervisorStart = "supervisor_start" // its start time, clock ticks since boot
	RecordCgroupMemory    = "cgroup_memory"    // the collector cgroup's memory bound file
	RecordCgroupCpuset    = "cgroup_cpuset"    // the collector cgroup's cpuset.cpus file
	RecordControlSocket   = "hold_socket"      // the control socket's path, in root's job record dir (its first name, kept for jobs across an upgrade)
	RecordOutputDir       = "output_dir"       // the node's collector dir (the supervisor's report)
	RecordBackend         = "backend"          // the OTLP/HTTP base URL the collector ships to, no credentials
	RecordEnv             = "env"              // one task variable, "NAME=value"
	RecordUnset           = "unset"            // one variable the steps take out
	// RecordResAttr is one resource attribute of the job's identity,
	// "key=<value, percent-encoded>", that every task's
	// OTEL_RESOURCE_ATTRIBUTES gets where the key is not there yet.
	RecordResAttr = "resattr"
)

// The control socket's protocol (the socket was first the batch step's
// hold socket: the C macros keep their GOS_HOLD_ names, and the record's
// key RecordControlSocket its value "hold_socket", for the steps of jobs
// running across an upgrade): root's lines to the job's supervisor on the
// node (helper/supervise's controlsock.go answers; spank/controlsock.c sends
// the steps' lines, helper/launch the epilog's). One connection carries
// one request line, ended by "\n", of at most ControlRequestMax bytes, and
// one answer of less than ControlAnswerMax bytes; root's clients wait at
// most ControlExchangeMs for the answer.
const (
	// ControlQuestion is the batch step's question after its script's end,
	// "sampled": has every scrape target of the job a sample stamped at
	// or after the script's end? The answer is two "key=<digits>" lines,
	// ControlTargets and ControlSampledMs, or none while the supervisor does
	// not know yet.
	ControlQuestion  = "sampled"
	ControlTargets   = "targets"    // the job's scrape targets
	ControlSampledMs = "sampled_ms" // unix ms: every target has a sample at or after it; 0: not yet
	// ControlFinal starts the batch step's line once its script has ended
	// ("final <the job's node count>", root only): the supervisor scrapes
	// every target once now, while the job's services still run (and asks
	// the other nodes' supervisors to), and answers ControlOK at once.
	ControlFinal = "final"
	// ControlStepStart starts a step's line at its start (root only):
	// "step start <step id> <unix ms>". The answer is ControlOK, or ControlOK,
	// a space and the traceparent (TraceparentLen characters) the step's
	// tasks get as TRACEPARENT.
	ControlStepStart = "step start"
	// ControlStepEnd starts a step's line at its end (root only): "step end
	// <step id> <start ms> <end ms> <tasks end ms|0> <final wait end ms|0>
	// <exit code|-1> <signal|0> <tasks>", answered ControlOK.
	ControlStepEnd = "step end"
	// ControlEpilogStart starts the job epilog's line: "epilog start <unix
	// ms>", or with the job's exit "epilog start <unix ms> <status>
	// <derived>" (two wait statuses), answered ControlOK.
	ControlEpilogStart = "epilog start"
	// ControlOK is the answer that takes a line (followed by "\n", or for
	// ControlStepStart by " <traceparent>\n"); any other answer, or none,
	// refuses it.
	ControlOK = "ok"
	// ControlRequestMax bounds a request line, bytes with its "\n": longer
	// ones are closed unanswered.
	ControlRequestMax = 192
	// ControlAnswerMax bounds an answer, bytes: root's clients refuse one of
	// this many bytes or more.
	ControlAnswerMax = 256
	// ControlExchangeMs bounds one exchange of a step (connect, line,
	// answer) in milliseconds.
	ControlExchangeMs = 250
	// TraceparentLen is the length of a W3C trace-context traceparent of
	// version 00, "00-<32 hex>-<16 hex>-<2 hex>".
	TraceparentLen = 55
)

// define is one #define: a C macro name, its Go source, and its value
// (a string or an int).
type define struct {
	name, source string
	value        any
}

func defines() []define {
	return []define{
		{"GOS_DEFAULT_RECORD_DIR", "DefaultRecordDir", DefaultRecordDir},
		{"GOS_RECORD_FILE", "RecordFile", RecordFile},
		{"GOS_HOLD_PATH_MAX", "ControlPathMax", ControlPathMax},
		{"GOS_MAX_FINAL_WAIT", "MaxFinalWait, seconds", int(MaxFinalWait / time.Second)},
		{"GOS_ENV_IN_JOB", "EnvInJob", EnvInJob},
		{"GOS_JOB_CONTROL_SPEC", "JobControlSpec", JobControlSpec},
		{"GOS_JOB_CONTROL_TOKEN", "JobControlToken", JobControlToken},
		{"GOS_RECORD_STATUS", "RecordStatus", RecordStatus},
		{"GOS_RECORD_ON_FAILURE", "RecordOnFailure", RecordOnFailure},
		{"GOS_RECORD_REASON", "RecordReason", RecordReason},
		{"GOS_RECORD_FINAL_WAIT", "RecordFinalWait", RecordFinalWait},
		{"GOS_RECORD_SUPERVISOR_PID", "RecordSupervisorPID", RecordSupervisorPID},
		{"GOS_RECORD_SUPERVISOR_START", "RecordSupervisorStart", RecordSupervisorStart},
		{"GOS_RECORD_CGROUP_MEMORY", "RecordCgroupMemory", RecordCgroupMemory},
		{"GOS_RECORD_CGROUP_CPUSET", "RecordCgroupCpuset", RecordCgroupCpuset},
		{"GOS_RECORD_HOLD_SOCKET", "RecordControlSocket", RecordControlSocket},
		{"GOS_RECORD_OUTPUT_DIR", "RecordOutputDir", RecordOutputDir},
		{"GOS_RECORD_BACKEND", "RecordBackend", RecordBackend},
		{"GOS_RECORD_ENV", "RecordEnv", RecordEnv},
		{"GOS_RECORD_UNSET", "RecordUnset", RecordUnset},
		{"GOS_RECORD_RESATTR", "RecordResAttr", RecordResAttr},
		{"GOS_HOLD_QUESTION", "ControlQuestion", ControlQuestion},
		{"GOS_HOLD_TARGETS", "ControlTargets", ControlTargets},
		{"GOS_HOLD_SAMPLED_MS", "ControlSampledMs", ControlSampledMs},
		{"GOS_HOLD_FINAL", "ControlFinal", ControlFinal},
		{"GOS_HOLD_STEP_START", "ControlStepStart", ControlStepStart},
		{"GOS_HOLD_STEP_END", "ControlStepEnd", ControlStepEnd},
		{"GOS_HOLD_EPILOG_START", "ControlEpilogStart", ControlEpilogStart},
		{"GOS_HOLD_OK", "ControlOK", ControlOK},
		{"GOS_HOLD_REQUEST_MAX", "ControlRequestMax", ControlRequestMax},
		{"GOS_HOLD_ANSWER_MAX", "ControlAnswerMax", ControlAnswerMax},
		{"GOS_HOLD_EXCHANGE_MS", "ControlExchangeMs", ControlExchangeMs},
		{"GOS_TRACEPARENT_LEN", "TraceparentLen", TraceparentLen},
		{"GOS_ENV_PROLOG_START", "EnvPrologStart", EnvPrologStart},
		{"GOS_ENV_EPILOG_START", "EnvEpilogStart", EnvEpilogStart},
		{"GOS_ENV_SLURMD_PID", "EnvSlurmdPID", EnvSlurmdPID},
		{"GOS_DEFAULT_PROLOG_TIMEOUT", "DefaultPrologTimeout", DefaultPrologTimeout},
		{"GOS_START_LOCK_PREFIX", "StartLockPrefix", StartLockPrefix},
		{"GOS_START_LOCK_SUFFIX", "StartLockSuffix", StartLockSuffix},
	}
}

// Header is the text of include/gym_otel_contract.h.
func Header() string {
	var b strings.Builder
	b.WriteString(`/*
 * gym_otel_contract.h: the constants the C front shares with the Go side.
 * Generated from the Go constants of helper/contract (go generate); do
 * not edit.
 */
#ifndef GYM_OTEL_CONTRACT_H
#define GYM_OTEL_CONTRACT_H

`)
	for _, d := range defines() {
		var v string
		switch x := d.value.(type) {
		case string:
			v = strconv.Quote(x)
		case int:
			v = strconv.Itoa(x)
		default:
			panic(fmt.Sprintf("contract: %s: %T", d.name, d.value))
		}
		fmt.Fprintf(&b, "/* %s */\n#define %s %s\n", d.source, d.name, v)
	}
	b.WriteString("\n#endif\n")
	return b.String()
}
