package launch_test

import (
	"os"

	"golang.org/x/sys/unix"
)

// fcntlFlags is f's open flags (F_GETFL).
func fcntlFlags(f *os.File) (int, error) {
	return unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
}
