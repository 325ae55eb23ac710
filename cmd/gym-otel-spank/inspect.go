package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/gym-otel-spank/gym-otel-spank/helper/atomicfile"
	"github.com/gym-otel-spank/gym-otel-spank/helper/inspect"
	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
)

func init() {
	commands["inspect"] = command{"report how a job ran from its jsonl files (every node, every later link of its chain): text, --json or --html", runInspect}
}

func runInspect(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("inspect", "[--json] [--html FILE [--chartjs FILE]] [--require-targets] [--no-sacct] DIR   (a job dir, or its otel/ dir)", stderr)
	require := fs.Bool("require-targets", false, "exit non-zero, naming the target, when a scrape target in a collector.yaml has no answered scrape in its metrics.jsonl")
	asJSON := fs.Bool("json", false, "print the report as JSON (schema: docs/inspect.md) instead of text")
	htmlOut := fs.String("html", "", "also write the report as one self-contained HTML `FILE` with charts (Chart.js inlined)")
	noSacct := fs.Bool("no-sacct", false, "do not ask sacct for the job's state, exit code and elapsed time (the outcome is then derived from the files)")
	chartJS := fs.String("chartjs", "", "the Chart.js `FILE` (UMD build) to inline into --html (default: Debian's libjs-chart.js under /usr/share/javascript/chart.js)")
	rest, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageError{fmt.Sprintf("give one directory (got %d arguments: %s)", len(rest), strings.Join(rest, " "))}
	}
	if *chartJS != "" && *htmlOut == "" {
		return usageError{"--chartjs " + *chartJS + ": only with --html FILE"}
	}
	inspectGC()
	dir := rest[0]
	if st, err := os.Stat(dir); err != nil {
		return err
	} else if !st.IsDir() {
		return fmt.Errorf("%s: not a directory", dir)
	}
	// Chart.js first: a missing library fails before the files are read.
	var js []byte
	if *htmlOut != "" {
		var err error
		if js, err = inspect.LoadChartJS(*chartJS); err != nil {
			return err
		}
	}
	r, err := inspect.Build(dir)
	if err != nil {
		return err
	}
	// The job's state as Slurm's accounting has it, bounded in time; the
	// files' own answer stays where sacct is missing or does not answer.
	if *noSacct {
		r.Outcome.Sacct = "not asked (--no-sacct)"
	} else {
		r.Account(context.Background(), slurm.QueryAccounting)
	}
	if *htmlOut != "" {
		if err := writeHTML(*htmlOut, r, js); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "gym-otel: wrote %s\n", *htmlOut)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else if err := r.WriteText(stdout); err != nil {
		return err
	}
	if *require {
		var missing []error
		for _, d := range r.Health.Dirs {
			ts := make([]inspect.Target, len(d.Targets))
			for i, t := range d.Targets {
				ts[i] = inspect.Target{Job: t.Job, Instance: t.Instance, Scrapes: t.Scrapes, Answered: t.Answered}
			}
			if err := inspect.Unanswered(d.Dir, ts); err != nil {
				missing = append(missing, err)
			}
		}
		return errors.Join(missing...)
	}
	return nil
}

// writeHTML writes the page to a temporary file beside path and renames it
// into place, so a reader never sees half a page.
// inspectGCPercent is the garbage collector's target for inspect (Go's
// default is 100): a 64-node job dir of 1 GiB keeps about 80 MiB live, and
// with the default the heap grew to about 150 MiB before each collection,
// a peak RSS of 184-215 MiB against the goal of 200; with 50 it was 149
// MiB in about the same time. GOGC in the environment still decides.
const inspectGCPercent = 50

// inspectGC sets inspectGCPercent unless GOGC is set.
func inspectGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(inspectGCPercent)
	}
}

func writeHTML(path string, r *inspect.Report, js []byte) error {
	if err := atomicfile.WriteFrom(path, 0o644, func(w io.Writer) error { return r.WriteHTML(w, js) }); err != nil {
		return fmt.Errorf("--html %s: %w", path, err)
	}
	return nil
}
