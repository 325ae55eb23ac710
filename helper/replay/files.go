package replay

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
)

// Signals are the jsonl files of a node dir, by signal.
var Signals = []string{"traces", "metrics", "logs"}

// File is one jsonl file to send and what it holds.
type File struct {
	// Path is the file's absolute path; Signal "traces", "metrics" or "logs".
	Path, Signal string
	// Lines counts its lines; BadLines those that are not one OTLP-JSON
	// object (the file receiver skips them too: they cannot be replayed).
	Lines, BadLines int
	// Items counts what the file receiver counts as received per line:
	// spans, metrics (not points: the receiver counts metrics), log records.
	Items int64
	// Exported counts what an exporter counts: spans, metric data points,
	// log records.
	Exported int64
	// MaxLine is the longest line in bytes.
	MaxLine int
	// Source is the job's file the lines were copied from when Path is a
	// copy (ScanAppended), "" when Path is the job's file itself.
	Source string
}

// source is the job's file the lines come from.
func (f File) source() string {
	if f.Source != "" {
		return f.Source
	}
	return f.Path
}

// MaxAppended bounds one appended line ScanAppended copies, bytes.
const MaxAppended = 1 << 20

// ScanAppended copies, into tmp, the lines each node dir's receipt lists as
// appended after the collector's exit (receipt.Appended), one file per
// line, and counts them. Lines the supervisor delivered to the backend at
// the drain (Appended.Delivered) are skipped unless force, and counted in
// delivered. A dir without a receipt adds nothing (said on out). Errors:
// a receipt that does not read, a listed line that is not in its file
// (beyond its end, not ending in a newline, more than one line, longer
// than MaxAppended), the file a symbolic link.
func ScanAppended(dirs []string, tmp string, force bool, out io.Writer) (files []File, delivered int, err error) {
	for _, d := range dirs {
		r, err := receipt.Read(d)
		if errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(out, "replay: note: %s has no receipt: nothing appended there is known\n", d)
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		for _, a := range r.Appended {
			if a.Delivered && !force {
				delivered++
				continue
			}
			src, err := filepath.Abs(filepath.Join(d, a.File))
			if err != nil {
				return nil, 0, err
			}
			line, err := readLine(src, a.Offset, a.Length)
			if err != nil {
				return nil, 0, fmt.Errorf("%s: the line the receipt lists at offset %d: %w", src, a.Offset, err)
			}
			f, err := lineFile(tmp, len(files), strings.TrimSuffix(a.File, ".jsonl"), line)
			if err != nil {
				return nil, 0, err
			}
			f.Source = src
			files = append(files, f)
		}
	}
	return files, delivered, nil
}

// lineFile writes line (one OTLP-JSON line of signal sig, its newline
// included) to tmp/appended-<i>.<sig>.jsonl and counts it: a File to
// send. Errors: the file system's.
func lineFile(tmp string, i int, sig string, line []byte) (File, error) {
	p := filepath.Join(tmp, fmt.Sprintf("appended-%d.%s", i, jobdir.SignalFile(sig)))
	if err := os.WriteFile(p, line, 0o600); err != nil {
		return File{Path: p, Signal: sig}, err
	}
	return countFile(p, sig)
}

// readLine reads the one line of length bytes at offset in path (not
// through a symbolic link).
func readLine(path string, offset, length int64) ([]byte, error) {
	if length <= 0 || length > MaxAppended || offset < 0 {
		return nil, fmt.Errorf("length %d: not a line of at most %d bytes", length, MaxAppended)
	}
	fh, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	if fi, err := fh.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%v)", err)
	}
	b := make([]byte, length)
	if _, err := fh.ReadAt(b, offset); err != nil {
		return nil, fmt.Errorf("beyond the file's end: %w", err)
	}
	if b[len(b)-1] != '\n' || bytes.IndexByte(b, '\n') != len(b)-1 || (offset > 0 && !newlineBefore(fh, offset)) {
		return nil, errors.New("not one whole line")
	}
	return b, nil
}

func newlineBefore(fh *os.File, offset int64) bool {
	b := make([]byte, 1)
	_, err := fh.ReadAt(b, offset-1)
	return err == nil && b[0] == '\n'
}

// Dirs returns the node dirs of a job: dir's otel/ (or dir itself when it
// is one), each later link of its chain (links/<job id>), and each node dir
// (nodes/<node>) of those, in that order. A links/ or nodes/ entry is
// followed only when its real path (symbolic links resolved) lies inside
// the real path of the first dir; the others are returned in skipped.
// Errors: dir does not exist.
func Dirs(dir string) (dirs, skipped []string, err error) {
	nodes, skipped, err := nodeDirs(dir)
	for _, n := range nodes {
		dirs = append(dirs, n.Path)
	}
	return dirs, skipped, err
}

// RealPath is path made absolute with every symbolic link resolved.
func RealPath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

// Inside reports whether path's real path (symbolic links resolved) is
// root or lies under it; root must be a real path (RealPath). A path that cannot be
// resolved is not inside.
func Inside(root, path string) bool {
	real, err := RealPath(path)
	if err != nil {
		return false
	}
	rel, err := filepath.Rel(root, real)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

// Scan counts the items of every non-empty jsonl file of dirs.
func Scan(dirs []string) ([]File, error) {
	var files []File
	for _, d := range dirs {
		for _, sig := range Signals {
			p, err := filepath.Abs(filepath.Join(d, jobdir.SignalFile(sig)))
			if err != nil {
				return nil, err
			}
			f, err := countFile(p, sig)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			if f.Lines > 0 {
				files = append(files, f)
			}
		}
	}
	return files, nil
}

func countFile(path, sig string) (File, error) {
	f := File{Path: path, Signal: sig}
	fh, err := os.Open(path)
	if err != nil {
		return f, err
	}
	defer fh.Close()
	r := bufio.NewReaderSize(fh, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			f.count(bytes.TrimRight(line, "\n"))
		}
		if err == io.EOF {
			return f, nil
		}
		if err != nil {
			return f, fmt.Errorf("%s: %w", path, err)
		}
	}
}

func (f *File) count(line []byte) {
	f.Lines++
	f.MaxLine = max(f.MaxLine, len(line))
	exported, metrics, ok := jobdir.CountItems(f.Signal, line)
	if !ok {
		f.BadLines++
		return
	}
	f.Exported += exported
	if f.Signal == "metrics" {
		f.Items += metrics
	} else {
		f.Items += exported
	}
}
