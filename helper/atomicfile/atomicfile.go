// Package atomicfile writes a file whole: a reader of its path sees the old
// file or the new one, never half of it. It is the one writer of the job's
// files (state.json, collector.yaml, receipt.json), root's record and the
// inspect page.
package atomicfile

import (
	"io"
	"os"
	"path/filepath"
)

// Write writes data to path through a temporary file of a random name in
// the same dir (never a fixed name another user could have planted as a
// link), given mode before any byte is written, and renamed into place.
// Errors: the file system's (the temporary file is removed).
func Write(path string, data []byte, mode os.FileMode) error {
	return write(path, mode, false, bytesOf(data))
}

// WriteSynced is Write with the data flushed to the disk (fsync) before
// the rename: after a crash the file is the old one or the whole new one.
func WriteSynced(path string, data []byte, mode os.FileMode) error {
	return write(path, mode, true, bytesOf(data))
}

// WriteFrom is Write with the content streamed by fill into the temporary
// file; an error of fill leaves path as it was and is returned.
func WriteFrom(path string, mode os.FileMode, fill func(io.Writer) error) error {
	return write(path, mode, false, fill)
}

func bytesOf(data []byte) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}
}

func write(path string, mode os.FileMode, sync bool, fill func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = f.Chmod(mode)
	if err == nil {
		err = fill(f)
	}
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}
