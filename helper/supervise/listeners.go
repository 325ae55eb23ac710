package supervise

import (
	"fmt"
	"os"

	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
)

// errForeignListener: a port the supervisor chose is listened on by a
// process that is not this job's collector (another user on a shared node
// bound it between the choice and the collector's bind).
type errForeignListener struct{ port int }

func (e errForeignListener) Error() string {
	return fmt.Sprintf("port %d on 127.0.0.1 is held by a process that is not this job's collector", e.port)
}

// verifyListeners proves that every one of ports is listened on, on
// 127.0.0.1, by a socket of the collector's process group (the collector,
// or the container runtime and its children): the socket inodes of the
// node's listening sockets (launch.NodeListeners) against the descriptors of
// those processes. A socket of this same user that is not in the group (a
// runtime that started the collector in a session of its own) is the job's
// user's, not a foreign one, and passes. Any other listener on such a port, or a port nobody
// listens on, is an error: the health check or the job's telemetry could
// be answered by another user.
//
// The group's leader (the collector itself, for a host binary) holds the
// sockets as a rule: its descriptors are looked at first, and every
// process of the node only when they do not prove every port (a container
// runtime's collector), so the result is the same as from the whole group.
func verifyListeners(pgid int, ports []int) error {
	listen, err := launch.NodeListeners()
	if err != nil {
		return fmt.Errorf("reading the node's listeners: %w", err)
	}
	if st, err := proc.ReadStat(pgid); err == nil && st.Pgid == pgid {
		leader := map[uint64]bool{}
		for _, ino := range proc.SocketInodes(pgid) {
			leader[ino] = true
		}
		if listenedBy(listen, leader, ports) == nil {
			return nil
		}
	}
	return listenedBy(listen, groupSockets(pgid), ports)
}

// listenedBy checks every one of ports against listen: listened on, and
// only by sockets in ours or of this user.
func listenedBy(listen map[int][]launch.Listener, ours map[uint64]bool, ports []int) error {
	for _, p := range ports {
		inodes := listen[p]
		if len(inodes) == 0 {
			return fmt.Errorf("port %d on 127.0.0.1: the collector does not listen on it", p)
		}
		for _, sk := range inodes {
			if !ours[sk.Inode] && sk.UID != uint32(os.Getuid()) {
				return errForeignListener{p}
			}
		}
	}
	return nil
}

// groupSockets returns the socket inodes held by the processes of process
// group pgid (that this user may read).
func groupSockets(pgid int) map[uint64]bool {
	out := map[uint64]bool{}
	pids, _ := proc.Pids()
	for _, pid := range pids {
		if st, err := proc.ReadStat(pid); err != nil || st.Pgid != pgid {
			continue
		}
		for _, ino := range proc.SocketInodes(pid) {
			out[ino] = true
		}
	}
	return out
}
