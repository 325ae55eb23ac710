package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/gym-otel-spank/gym-otel-spank/helper/inspect"
	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
)

func init() {
	commands["inspect"] = command{"summarise the jsonl files of a job's otel/ dir, of every node and of every later link of its chain under it", runInspect}
}

func runInspect(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("inspect", "[--require-targets] DIR   (a job dir, or its otel/ dir)", stderr)
	require := fs.Bool("require-targets", false, "exit non-zero, naming the target, when a scrape target in a collector.yaml has no answered scrape in its metrics.jsonl")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	if fs.NArg() != 1 {
		return usageError{"give one directory"}
	}
	dir := fs.Arg(0)
	if st, err := os.Stat(filepath.Join(dir, "otel")); err == nil && st.IsDir() {
		dir = filepath.Join(dir, "otel")
	}
	// The job's own dirs, then each later link of a chain (links/<job id>)
	// with its nodes.
	var dirs []string
	for _, d := range append([]string{dir}, globDirs(filepath.Join(dir, "links", "*"))...) {
		dirs = append(dirs, d)
		dirs = append(dirs, globDirs(filepath.Join(d, "nodes", "*"))...)
	}
	// First what each node's collector says it received, wrote and sent
	// (receipt.json, written at the drain): losses show in these lines.
	for _, d := range dirs {
		r, err := receipt.Read(d)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if _, serr := os.Stat(filepath.Join(d, "collector.yaml")); serr == nil {
				fmt.Fprintf(stdout, "no receipt in %s: the collector has not drained yet, or its supervisor was killed before the drain\n", d)
			}
		case err != nil:
			fmt.Fprintf(stdout, "receipt: %v\n", err)
		default:
			for _, l := range r.Summary() {
				fmt.Fprintln(stdout, l)
			}
		}
	}
	var missing []error
	for _, d := range dirs {
		s, err := inspect.Dir(d)
		if err != nil {
			return err
		}
		s.Write(stdout)
		ts, err := inspect.Targets(d)
		if errors.Is(err, os.ErrNotExist) {
			continue // no collector.yaml: a backend's files
		}
		if err != nil {
			return err
		}
		inspect.WriteTargets(stdout, ts)
		if err := inspect.Unanswered(d, ts); err != nil {
			missing = append(missing, err)
		}
	}
	if *require {
		return errors.Join(missing...)
	}
	return nil
}

// globDirs returns the directories matching pattern, sorted.
func globDirs(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	var out []string
	for _, p := range m {
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			out = append(out, p)
		}
	}
	return out
}
