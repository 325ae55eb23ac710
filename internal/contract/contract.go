// Package contract writes include/gym_otel_contract.h: the constants the C
// front shares with the Go side (file names, environment names, bounds),
// generated from the Go constants so that the two cannot drift. Regenerate
// with `go generate ./internal/contract`; TestHeaderCurrent fails while the
// committed header differs.
package contract

//go:generate go run ./gen ../../include/gym_otel_contract.h

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gym-otel-spank/gym-otel-spank/helper/lifecycle"
	"github.com/gym-otel-spank/gym-otel-spank/helper/plugin"
	"github.com/gym-otel-spank/gym-otel-spank/helper/record"
	"github.com/gym-otel-spank/gym-otel-spank/helper/taskenv"
	"github.com/gym-otel-spank/gym-otel-spank/helper/timing"
)

// define is one #define: a C macro name, its Go source, and its value
// (a string or an int).
type define struct {
	name, source string
	value        any
}

func defines() []define {
	return []define{
		{"GOS_DEFAULT_RECORD_DIR", "plugin.DefaultRecordDir", plugin.DefaultRecordDir},
		{"GOS_RECORD_FILE", "record.File", record.File},
		{"GOS_HOLD_SOCKET_PREFIX", "lifecycle.HoldSocketPrefix", lifecycle.HoldSocketPrefix},
		{"GOS_MAX_FINAL_WAIT", "timing.MaxFinalWait, seconds", timing.Seconds(timing.MaxFinalWait)},
		{"GOS_ENV_IN_JOB", "plugin.EnvInJob", plugin.EnvInJob},
		{"GOS_JOB_CONTROL_SPEC", "plugin.JobControlSpec", plugin.JobControlSpec},
		{"GOS_JOB_CONTROL_TOKEN", "taskenv.JobControlToken", taskenv.JobControlToken},
	}
}

// Header is the text of include/gym_otel_contract.h.
func Header() string {
	var b strings.Builder
	b.WriteString(`/*
 * gym_otel_contract.h: the constants the C front shares with the Go side.
 * Generated from the Go constants by internal/contract (go generate); do
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
