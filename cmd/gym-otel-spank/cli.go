package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"time"
)

// version is this program's (and the plugin's) version: the RPM's Version.
// The build may set it with -ldflags "-X main.version=...".
var version = "0.1.0"

// slurmVersion is the Slurm release whose headers the plugin was built
// against (slurm_version.h's SLURM_VERSION_STRING), set by the build with
// -ldflags "-X main.slurmVersion=..."; empty when the build did not say.
var slurmVersion = ""

// parseArgs parses fs's flags wherever they are among args (`inspect DIR
// --json` as `inspect --json DIR`) and returns the other arguments in
// order; everything after "--" is an argument. Errors are usage errors
// (flag.ErrHelp for -h/--help).
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		before, after, dashdash := cutDashDash(fs, args)
		if err := parseQuiet(fs, before); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.Usage()
				return nil, err
			}
			return nil, usageError{err.Error()}
		}
		if fs.NArg() == 0 {
			if dashdash {
				rest = append(rest, after...)
			}
			return rest, nil
		}
		rest = append(rest, fs.Arg(0))
		next := fs.Args()[1:]
		if dashdash {
			next = append(append(next, "--"), after...)
		}
		args = next
	}
}

// parseQuiet parses args with fs's output and Usage silenced: the caller
// prints the usage for --help, and a bad flag once, as a usage error.
func parseQuiet(fs *flag.FlagSet, args []string) error {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	defer func() { fs.Usage = usage; fs.SetOutput(out) }()
	return fs.Parse(args)
}

// cutDashDash splits args at the first "--" that is not a flag's value.
func cutDashDash(fs *flag.FlagSet, args []string) (before, after []string, found bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return args[:i], args[i+1:], true
		}
		if !strings.HasPrefix(a, "-") || strings.Contains(a, "=") {
			continue
		}
		if f := fs.Lookup(strings.TrimLeft(a, "-")); f != nil {
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
				i++ // its value
			}
		}
	}
	return args, nil, false
}

// durationFlag is a time.Duration flag whose parse error says what a
// duration looks like.
type durationFlag struct{ d *time.Duration }

func (f durationFlag) String() string {
	if f.d == nil {
		return ""
	}
	return f.d.String()
}

func (f durationFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		hint := "a number with a unit: 500ms, 30s, 5m, 1h30m"
		if _, nerr := fmt.Sscanf(s, "%f", new(float64)); nerr == nil && !strings.ContainsAny(s, "hmsuµn") {
			hint = "a unit is needed: " + s + "s for seconds, " + s + "m for minutes"
		}
		return fmt.Errorf("%q is not a duration (%s)", s, hint)
	}
	*f.d = d
	return nil
}

// durationVar defines a duration flag with durationFlag's errors.
func durationVar(fs *flag.FlagSet, name string, value time.Duration, usage string) *time.Duration {
	d := value
	fs.Var(durationFlag{&d}, name, usage)
	return &d
}

// runVersion prints this program's version, the Slurm release the plugin
// was built for and the collector's own --version. A collector that is not
// there (a login node) is said and is no error; one that does not answer
// is (errFailed).
func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", "[--binary PATH]", stderr)
	binary := fs.String("binary", "", "the collector `PATH` whose version to show (default as replay: /usr/bin/otelcol-gym, else beside this program or on PATH)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	v := "gym-otel-spank " + version
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " (commit " + s.Value[:12] + ")"
			}
		}
		v += ", " + bi.GoVersion
	}
	fmt.Fprintln(stdout, v)
	if slurmVersion != "" {
		fmt.Fprintf(stdout, "built for Slurm %s\n", slurmVersion)
	} else {
		fmt.Fprintln(stdout, "built for Slurm: not recorded by this build (the plugin works with Slurm 22.05 and later)")
	}
	bin := collectorBinary(*binary)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		// A login node has no collector: what this program knows is
		// the answer.
		fmt.Fprintf(stdout, "collector: not found (%s; the nodes run it: install otelcol-gym there, or give --binary PATH)\n", bin)
		return nil
	}
	if err != nil {
		fmt.Fprintf(stdout, "collector: %s --version failed: %v (install otelcol-gym, or give --binary PATH)\n", bin, err)
		return errFailed
	}
	fmt.Fprintf(stdout, "collector: %s (%s)\n", strings.TrimSpace(string(out)), bin)
	return nil
}

func init() {
	commands["version"] = command{"print the version of this program, the Slurm it was built for, and the collector's (also --version)", runVersion}
}
