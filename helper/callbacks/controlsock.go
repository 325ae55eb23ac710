package callbacks

import (
	"fmt"
	"net"
	"os"

	"github.com/gym-otel-spank/gym-otel-spank/helper/record"
)

// controlListener makes the job's control socket (helper/supervise's
// controlsock.go) as root, before the supervisor starts: the dir
// <dir>/hold (root's, 0700: record.MakeControlDir) and in it the socket,
// bound, listening and 0600. It returns the listener as a file for the
// supervisor to inherit (at launch.ControlListenerFD) and the socket's
// path for root's record. The caller closes the file once the supervisor
// has started; the socket file stays until the epilog removes the record
// dir. Only root can connect: no other user, the job's own neither, can
// reach the supervisor's connection slots.
func controlListener(dir string) (*os.File, string, error) {
	path, err := record.MakeControlDir(dir)
	if err != nil {
		return nil, "", err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, "", fmt.Errorf("control socket: %w", err)
	}
	ln.SetUnlinkOnClose(false) // the supervisor serves it on after this copy is closed
	defer ln.Close()
	if err := os.Chmod(path, 0o600); err != nil {
		os.Remove(path)
		return nil, "", fmt.Errorf("control socket: %w", err)
	}
	f, err := ln.File()
	if err != nil {
		os.Remove(path)
		return nil, "", fmt.Errorf("control socket: %w", err)
	}
	return f, path, nil
}
