package delivery

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// LockFile is the delivery lock's name in a node dir, beside the
// checkpoint: an empty file on which the one process delivering from the
// checkpoint holds an exclusive flock(2) while it runs (the supervisor's
// sender for the job's life and its drain; a replay while it sends). The
// checkpoint itself cannot carry the lock: it is replaced whole at every
// write.
//
// Why a lock and not a warning: two senders from one checkpoint read the
// same offset and send the same lines, so the backend holds them twice
// (beyond any bound a receipt counts), and the last writer's checkpoint
// wins. A replay started while the job still runs is a mistake a user
// makes easily (the hint to replay comes with the first failed request);
// refusing it, naming the node and the flag that overrides it, costs
// nothing when the job has ended, since the kernel releases the lock when
// the sender's process exits, however it ends.
const LockFile = "delivery.lock"

// LockedError is Lock's answer when another process holds the node dir's
// delivery lock.
type LockedError struct {
	// Dir is the node dir.
	Dir string
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("another process holds %s's delivery lock (%s): it is delivering from %s now", e.Dir, LockFile, CheckpointFile)
}

// ErrLockUnsupported is wrapped by Lock's error when the file system does
// not implement flock(2) (ENOLCK, EOPNOTSUPP, ENOSYS: Lustre mounted
// without -o flock, some NFS setups): whether another process delivers is
// then not known.
var ErrLockUnsupported = errors.New("the file system has no flock(2)")

// Lock takes dir's delivery lock without waiting: LockFile is opened (made
// 0600 when missing: a user who could open it could hold it, and so stop
// the job's own delivery) without following a link or blocking on a
// FIFO, checked to be a regular file, and locked exclusively with
// flock(2). It returns the function that releases it (closing the file;
// the file stays, empty). Errors: *LockedError when another process holds
// it; one wrapping ErrLockUnsupported when the file system cannot tell;
// the open's error otherwise (a dir or a lock file the caller may not
// open: another user's job): whether another process delivers is then
// not known.
func Lock(dir string) (release func(), err error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("the delivery lock: %w", err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("the delivery lock %s: not a regular file", path)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			break
		}
	}
	switch {
	case err == nil:
		return func() { f.Close() }, nil
	case errors.Is(err, syscall.EWOULDBLOCK):
		f.Close()
		return nil, &LockedError{Dir: dir}
	case errors.Is(err, syscall.ENOLCK), errors.Is(err, syscall.EOPNOTSUPP), errors.Is(err, syscall.ENOSYS), errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.EBADF):
		f.Close()
		return nil, fmt.Errorf("the delivery lock %s: %w (%v)", path, ErrLockUnsupported, err)
	default:
		f.Close()
		return nil, fmt.Errorf("the delivery lock %s: %w", path, err)
	}
}
