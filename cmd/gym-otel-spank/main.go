// Command gym-otel-spank is the command-line side of the gym-otel-spank
// SPANK plugin: it validates and renders a job's collector configuration,
// prints the #SBATCH directive NeMo Gym's submit emits, runs the per-node
// supervisor the plugin's prolog starts, and inspects the jsonl files a job
// wrote.
//
// Exit codes: 0 success, 1 invalid configuration or a failed run, 2 usage.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/sirupsen/logrus"
)

// usageError marks a bad command line (exit 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// failed marks a command that ran and failed (exit 1) after printing its own
// message.
var errFailed = errors.New("failed")

// errUnanswered marks a replay that fell short only because the backend
// did not answer within the bound (exit 3): nothing of the files is lost,
// and a replay again sends what the backend did not take.
var errUnanswered = errors.New("the backend did not answer")

type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{
	"validate":  {"check a job's otel settings as the submit does", runValidate},
	"render":    {"print the collector configuration a job will write, with <placeholders> for what only the node knows (what gym eval submit --dry-run prints)", runRender},
	"directive": {"print the #SBATCH --gym-otel line for a staged NeMo Gym submit config", runDirective},
}

func main() {
	logrus.SetOutput(os.Stderr)
	logrus.SetFormatter(&logrus.TextFormatter{DisableTimestamp: true})
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" || args[0] == "-V" {
		args = append([]string{"version"}, args[1:]...)
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "gym-otel-spank: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	err := cmd.run(args[1:], stdout, stderr)
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "gym-otel-spank %s: %s\n", args[0], ue.msg)
		fmt.Fprintf(stderr, "(gym-otel-spank %s --help lists its flags)\n", args[0])
		return 2
	case errors.Is(err, errFailed):
		return 1
	case errors.Is(err, errUnanswered):
		return 3
	default:
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "gym-otel: %s\n", line)
		}
		return 1
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: gym-otel-spank <command> [flags]   (gym-otel-spank <command> --help for its flags)")
	fmt.Fprintln(w, "commands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
}

// newFlags makes a FlagSet whose errors become usage errors (exit 2). Its
// Usage (printed for --help) is the synopsis, then every flag as the
// synopsis spells it (--name).
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: gym-otel-spank %s %s\n", name, synopsis)
		printFlags(stderr, fs)
	}
	return fs
}

// printFlags lists fs's flags as flag.PrintDefaults does, but with the two
// dashes the synopses and man pages use.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		arg, text := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if arg != "" {
			line += " " + arg
		}
		text = strings.ReplaceAll(text, "\n", "\n    \t")
		line += "\n    \t" + text
		if d := f.DefValue; d != "" && d != "false" && d != "0" && d != "[]" {
			line += " (default " + d + ")"
		}
		fmt.Fprintln(w, line)
	})
}

// parseFlags parses a command that takes flags only.
func parseFlags(fs *flag.FlagSet, args []string) error {
	rest, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", rest[0])}
	}
	return nil
}

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
