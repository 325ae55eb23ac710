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
	fs := newFlags("inspect", "DIR   (a job dir, or its otel/ dir)", stderr)
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
	for _, d := range dirs {
		s, err := inspect.Dir(d)
		if err != nil {
			return err
		}
		s.Write(stdout)
	}
	return nil
}
