package supervise

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

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
// node's listening sockets (nodeListeners) against the descriptors of
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
	listen, err := nodeListeners()
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
func listenedBy(listen map[int][]socket, ours map[uint64]bool, ports []int) error {
	for _, p := range ports {
		inodes := listen[p]
		if len(inodes) == 0 {
			return fmt.Errorf("port %d on 127.0.0.1: the collector does not listen on it", p)
		}
		for _, sk := range inodes {
			if !ours[sk.inode] && sk.uid != uint32(os.Getuid()) {
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

// socket is one listening socket: its inode and owner.
type socket struct {
	inode uint64
	uid   uint32
}

// nodeListeners maps each port listened on at 127.0.0.1 or every address,
// v4 or v6, to its sockets: from the kernel's listening sockets
// (proc.ListeningTCP), else, where sock_diag is not there, from
// /proc/net/tcp and tcp6 (an unreadable tcp6 is a node without IPv6).
func nodeListeners() (map[int][]socket, error) {
	if rows, err := proc.ListeningTCP(); err == nil {
		return loopbackListeners(rows), nil
	}
	listen, err := tcpListeners(proc.NetTCP)
	if err != nil {
		return nil, err
	}
	if six, err := tcpListeners(proc.NetTCP6); err == nil {
		for p, socks := range six {
			listen[p] = append(listen[p], socks...)
		}
	}
	return listen, nil
}

// tcpListeners reads the table at path (/proc/net/tcp or tcp6) into
// loopbackListeners.
func tcpListeners(path string) (map[int][]socket, error) {
	rows, err := proc.ReadTCP(path)
	return loopbackListeners(rows), err
}

func parseTCP(r io.Reader) (map[int][]socket, error) {
	rows, err := proc.ParseTCP(r)
	return loopbackListeners(rows), err
}

// loopbackListeners maps each port listened on at 127.0.0.1 or every
// address (v4 or v6) to its sockets.
func loopbackListeners(rows []proc.TCPSocket) map[int][]socket {
	out := map[int][]socket{}
	for _, row := range rows {
		if row.State != "0A" {
			continue
		}
		addr, port, ok := strings.Cut(row.Local, ":")
		switch {
		case !ok:
			continue
		case addr == "0100007F", addr == "00000000": // 127.0.0.1, 0.0.0.0
		case addr == "00000000000000000000000000000000", addr == "0000000000000000FFFF00000100007F": // ::, ::ffff:127.0.0.1
		default:
			continue
		}
		p, err := strconv.ParseUint(port, 16, 16)
		if err != nil {
			continue
		}
		out[int(p)] = append(out[int(p)], socket{row.Inode, row.UID})
	}
	return out
}

// ListenersIn proves, for root's prolog, that every one of ports is
// listened on at 127.0.0.1 (or every address, v4 or v6) and only by
// sockets whose inodes are in ours (the sockets held by the processes of
// the job's cgroup): the ports a supervisor reported are its own
// collector's, not another job's, whatever the report says. Errors: the
// node's listeners unreadable, a port nobody listens on, or a port with
// any other listener (of any uid).
func ListenersIn(ports []int, ours map[uint64]bool) error {
	listen, err := nodeListeners()
	if err != nil {
		return fmt.Errorf("reading the node's listeners: %w", err)
	}
	for _, p := range ports {
		if len(listen[p]) == 0 {
			return fmt.Errorf("port %d on 127.0.0.1: no process of the job's cgroup listens on it", p)
		}
		for _, sk := range listen[p] {
			if !ours[sk.inode] {
				return fmt.Errorf("port %d on 127.0.0.1 is listened on by a socket (uid %d) of no process in the job's cgroup", p, sk.uid)
			}
		}
	}
	return nil
}
