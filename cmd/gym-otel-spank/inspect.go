package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"

	"github.com/gym-otel-spank/gym-otel-spank/helper/inspect"
)

func init() {
	commands["inspect"] = command{"summarise the jsonl files of a job's otel/ dir and of every node under it", runInspect}
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
	dirs := []string{dir}
	nodes, _ := filepath.Glob(filepath.Join(dir, "nodes", "*"))
	dirs = append(dirs, nodes...)
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
