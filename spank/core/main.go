// Command core is the Go core of the gym_otel SPANK plugin, built with
// -buildmode=c-shared into gym_otel_core.so and linked with -z nodelete.
// The C front (spank/core.c) dlopens it only when a job asked for a
// collector: at submit with the flag, in the job prolog when the job carries
// encoded settings, in the job epilog when a record exists. Its C ABI is
// declared in include/gym_otel_core.h; the logic lives in helper/callbacks.
//
// Log lines go to Slurm's own log functions (slurm_info, slurm_error,
// slurm_debug of the host process, found with purego.Dlsym), prefixed
// "gym-otel: ".
package main

/*
#include <stdlib.h>
#include <string.h>

typedef void (*gos_log_fn)(const char *fmt, ...);

static void gos_call_log(void *fn, const char *msg) {
	((gos_log_fn)fn)("gym-otel: %s", msg);
}
*/
import "C"

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/sirupsen/logrus"

	"github.com/gym-otel-spank/gym-otel-spank/helper/callbacks"
)

func main() {}

// getenv reads the process's environment as C sees it (getenv(3)). The Go
// runtime of a c-shared library takes its environment from the process's
// start (the stack after argv), so os.Getenv never sees what the C front
// set with setenv(3) before it loaded the core: the prolog's and the
// epilog's own start stamps (contract.EnvPrologStart, EnvEpilogStart).
func getenv(name string) string {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	if v := C.getenv(cs); v != nil {
		return C.GoString(v)
	}
	return ""
}

// slurmHook forwards logrus entries to Slurm's log functions.
type slurmHook struct {
	info, err, debug unsafe.Pointer
}

func (h *slurmHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h *slurmHook) Fire(e *logrus.Entry) error {
	fn := h.info
	switch {
	case e.Level <= logrus.WarnLevel:
		fn = h.err
	case e.Level >= logrus.DebugLevel:
		fn = h.debug
	}
	msg := e.Message
	for k, v := range e.Data {
		msg += fmt.Sprintf(" %s=%v", k, v)
	}
	if fn == nil {
		fmt.Fprintf(os.Stderr, "gym-otel: %s\n", msg)
		return nil
	}
	for _, line := range strings.Split(msg, "\n") {
		cs := C.CString(line)
		C.gos_call_log(fn, cs)
		C.free(unsafe.Pointer(cs))
	}
	return nil
}

var (
	logOnce sync.Once
	logger  *logrus.Logger
)

func log() *logrus.Logger {
	logOnce.Do(func() {
		logger = logrus.New()
		logger.SetOutput(io.Discard)
		logger.SetLevel(logrus.DebugLevel)
		h := &slurmHook{}
		sym := func(name string) unsafe.Pointer {
			p, err := purego.Dlsym(purego.RTLD_DEFAULT, name)
			if err != nil || p == 0 {
				return nil
			}
			return *(*unsafe.Pointer)(unsafe.Pointer(&p))
		}
		h.info, h.err, h.debug = sym("slurm_info"), sym("slurm_error"), sym("slurm_debug")
		logger.AddHook(h)
	})
	return logger
}

func goArgs(args *C.char) []string {
	if args == nil {
		return nil
	}
	s := C.GoString(args)
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func setOut(out **C.char, s string) {
	if out != nil {
		*out = C.CString(s)
	}
}

// gym_otel_core_submit: see include/gym_otel_core.h.
//
//export gym_otel_core_submit
func gym_otel_core_submit(args, spec, cwd *C.char, out **C.char) C.int {
	var b strings.Builder
	line := func(k, v string) {
		for _, l := range strings.Split(v, "\n") {
			b.WriteString(k + "=" + l + "\n")
		}
	}
	a, err := callbacks.ParseArgs(goArgs(args))
	if err != nil {
		line("error", err.Error())
		setOut(out, b.String())
		return 1
	}
	if os.Getuid() == 0 {
		// The collector runs as the job's user: root's would run with
		// every privilege, so root's jobs get none (the prolog refuses
		// them too).
		line("error", "--gym-otel: jobs of root (uid 0) get no collector: submit as the user whose job it is")
		setOut(out, b.String())
		return 1
	}
	res, err := callbacks.Submit(a, C.GoString(spec), C.GoString(cwd), os.LookupEnv)
	for _, w := range res.Warnings {
		line("warning", w)
	}
	if err != nil {
		line("error", err.Error())
		setOut(out, b.String())
		return 1
	}
	if res.Off {
		line("off", "1")
	} else {
		line("spec", res.Encoded)
		if res.TokenEnv != "" { // "": remote export off, no token travels
			line("token_env", res.TokenEnv)
		}
		if res.Token != "" && !strings.ContainsAny(res.Token, "\n") {
			line("token", res.Token)
		}
	}
	setOut(out, b.String())
	return 0
}

// gym_otel_core_prolog: see include/gym_otel_core.h.
//
//export gym_otel_core_prolog
func gym_otel_core_prolog(args, encoded, token *C.char, jobID, uid, gid C.uint) C.int {
	l := log()
	// A bad argument still reaches Prolog, which records the failure, so
	// the job's steps follow on_failure (C accepted the arguments it
	// knows; an otel key's value is Go's to check).
	a, argsErr := callbacks.ParseArgs(goArgs(args))
	err := callbacks.Prolog(callbacks.PrologInput{
		Args:    a,
		ArgsErr: argsErr,
		Encoded: C.GoString(encoded),
		Token:   C.GoString(token),
		JobID:   uint32(jobID),
		UID:     uint32(uid),
		GID:     uint32(gid),
		Getenv:  getenv,
	}, l)
	if err != nil {
		l.Errorf("job %d: %s", uint32(jobID), err)
		return 1
	}
	return 0
}

// gym_otel_core_epilog: see include/gym_otel_core.h.
//
//export gym_otel_core_epilog
func gym_otel_core_epilog(args, recordDir, node *C.char, jobID C.uint) C.int {
	l := log()
	// A bad argument was logged by C already; the epilog still ends what
	// a good configuration started, with the valid prolog_timeout if any.
	a, _ := callbacks.ParseArgs(goArgs(args))
	a.RecordDir = C.GoString(recordDir)
	if err := callbacks.Epilog(a, os.Getenv("SLURM_CLUSTER_NAME"), C.GoString(node), uint32(jobID), getenv, l); err != nil {
		l.Errorf("job %d: %s", uint32(jobID), err)
		return 1
	}
	return 0
}

// gym_otel_core_free frees a string the core returned.
//
//export gym_otel_core_free
func gym_otel_core_free(p *C.char) { C.free(unsafe.Pointer(p)) }
