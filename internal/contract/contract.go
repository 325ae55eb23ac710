// Package contract holds the names and bounds the C front shares with the
// Go side (file names, environment names, bounds) and writes them into
// include/gym_otel_contract.h, so that the two cannot drift. It is a leaf:
// the Go packages that use a name import it from here. Regenerate the
// header with `go generate ./internal/contract`; TestHeaderCurrent fails
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
	// HoldSocketPrefix starts the abstract name of the supervisor's hold
	// socket (helper/lifecycle's holdsock.go), which the batch step asks.
	HoldSocketPrefix = "gym-otel-hold-"
	// MaxFinalWait bounds the batch step's final-scrape wait, below Slurm's
	// default UnkillableStepTimeout of 60 s. Whole seconds; the steps (C)
	// clamp the record's final_wait to it (helper/timing computes it).
	MaxFinalWait = 30 * time.Second
	// EnvInJob is the variable the steps of a --gym-otel job set in its
	// tasks (spank/step.c): the job id. A submit that sees it, with
	// SLURM_JOB_ID the same, is a nested sbatch from inside that job.
	EnvInJob = "GYM_OTEL_JOB"
	// JobControlSpec is the job-control variable the submit side (C,
	// spank_job_control_setenv) hands the encoded spec to the prolog in;
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
		{"GOS_HOLD_SOCKET_PREFIX", "HoldSocketPrefix", HoldSocketPrefix},
		{"GOS_MAX_FINAL_WAIT", "MaxFinalWait, seconds", int(MaxFinalWait / time.Second)},
		{"GOS_ENV_IN_JOB", "EnvInJob", EnvInJob},
		{"GOS_JOB_CONTROL_SPEC", "JobControlSpec", JobControlSpec},
		{"GOS_JOB_CONTROL_TOKEN", "JobControlToken", JobControlToken},
		{"GOS_ENV_PROLOG_START", "EnvPrologStart", EnvPrologStart},
	}
}

// Header is the text of include/gym_otel_contract.h.
func Header() string {
	var b strings.Builder
	b.WriteString(`/*
 * gym_otel_contract.h: the constants the C front shares with the Go side.
 * Generated from the Go constants of internal/contract (go generate); do
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
