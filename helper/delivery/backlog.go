package delivery

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
)

// Backlog is what the backend has not acknowledged of one jsonl file:
// the complete lines past the checkpoint's offset and their items (what
// a later delivery, or replay, sends).
type Backlog struct {
	// Lines and Items count the complete lines past the offset and their
	// items (spans, metric data points, log records); BadLines those that
	// are not OTLP-JSON (not sent).
	Lines, Items, BadLines int64
	// Bytes is the size of those lines; Partial the bytes of a last line
	// without its newline (the file exporter's flush in progress).
	Bytes, Partial int64
}

// Backlogs reads dir's checkpoint and counts, for each signal's file that
// exists, what lies past its offset (a file without a position: all of
// it). Errors: the checkpoint's (ReadCheckpoint), a file that is not the
// one the checkpoint's offset is in or is shorter than it, a line longer
// than MaxLine, the file system's.
func Backlogs(dir string) (map[string]Backlog, error) {
	cp, err := ReadCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]Backlog{}
	for _, sig := range Signals {
		name := sig + ".jsonl"
		path := filepath.Join(dir, name)
		f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		b, err := backlog(f, path, sig, cp.Files[name])
		f.Close()
		if err != nil {
			return nil, err
		}
		out[name] = b
	}
	return out, nil
}

func backlog(f *os.File, path, sig string, pos *Position) (Backlog, error) {
	var b Backlog
	if pos == nil {
		pos = &Position{}
	}
	fi, _, err := checkFile(f, path, pos)
	if err != nil {
		return b, err
	}
	offset := pos.Offset
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return b, err
	}
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := readLine(r)
		if err == io.EOF {
			b.Partial = fi.Size() - offset - b.Bytes
			return b, nil
		}
		if err != nil {
			return b, fmt.Errorf("%s: %w", path, err)
		}
		b.Bytes += int64(len(line))
		b.Lines++
		body := bytes.TrimRight(line, "\r\n")
		n, ok := countItems(sig, body)
		if !ok || len(body) == 0 {
			b.BadLines++
			continue
		}
		b.Items += n
	}
}

// checkFile stats the open file f and checks that it is a regular file,
// the one pos's offset is in (when pos knows it) and not shorter than the
// offset. It returns its info and its device and inode.
func checkFile(f *os.File, path string, pos *Position) (os.FileInfo, *syscall.Stat_t, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || !ok {
		return nil, nil, fmt.Errorf("%s: not a regular file", path)
	}
	if pos.Ino != 0 && (pos.Dev != uint64(st.Dev) || pos.Ino != st.Ino) {
		return nil, nil, fmt.Errorf("%s: not the file the checkpoint's offset %d is in (%s names another file): it was replaced", path, pos.Offset, CheckpointFile)
	}
	if fi.Size() < pos.Offset {
		return nil, nil, fmt.Errorf("%s: %d bytes, shorter than the checkpoint's offset %d: it was truncated", path, fi.Size(), pos.Offset)
	}
	if pos.HeadLen > 0 {
		h, err := head(f, pos.HeadLen)
		if err != nil {
			return nil, nil, err
		}
		if h != pos.Head {
			return nil, nil, fmt.Errorf("%s: its first %d bytes are not those the checkpoint's offset %d was counted in (%s): it was replaced", path, pos.HeadLen, pos.Offset, CheckpointFile)
		}
	}
	return fi, st, nil
}

// head is the SHA-256 (hex) of f's first n bytes.
func head(f *os.File, n int64) (string, error) {
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// Totals is a node's delivery for its receipt: the checkpoint's figures
// summed over its files (the duplicates' bound counting the requests in
// flight), its last acknowledgement, and what lies past it (bl, from
// Backlogs; nil adds nothing). The catch-ups and the error are the
// caller's.
func Totals(cp *Checkpoint, bl map[string]Backlog) receipt.Delivery {
	var d receipt.Delivery
	for _, p := range cp.Files {
		d.Items += p.Items
		d.Accepted += p.Accepted
		d.Rejected += p.Rejected
		d.Requests += p.Requests
		d.Retries += p.Retries
		d.DuplicatesBound += p.DuplicatesBound + p.InFlight
		if p.AckedAt.After(d.LastAck) {
			d.LastAck = p.AckedAt
		}
	}
	for _, b := range bl {
		d.Backlog += b.Items
		d.BacklogLines += b.Lines
	}
	return d
}
