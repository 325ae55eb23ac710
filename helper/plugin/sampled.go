package plugin

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"

	"github.com/gym-otel-spank/gym-otel-spank/helper/lifecycle"
)

// MakeSampledHint creates the job's sampled hint (lifecycle.SampledFile)
// in the job's record dir dir: an empty regular file, mode 0600, owned by
// the job's user (uid, gid). The supervisor rewrites it; it cannot replace
// it or add files, since the directory stays root's. The batch step reads
// it as a hint only (spank/hold.c). A file left from an earlier use of the
// same dir is removed first.
func MakeSampledHint(dir string, uid, gid uint32) error {
	p := filepath.Join(dir, lifecycle.SampledFile)
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	fd, err := syscall.Open(p, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return &os.PathError{Op: "create", Path: p, Err: err}
	}
	defer syscall.Close(fd)
	if err := syscall.Fchown(fd, int(uid), int(gid)); err != nil {
		os.Remove(p)
		return &os.PathError{Op: "chown", Path: p, Err: err}
	}
	return nil
}
