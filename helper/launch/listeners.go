package launch

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
)

// Listener is one listening TCP socket: its inode and its owner's uid.
type Listener struct {
	Inode uint64
	UID   uint32
}

// NodeListeners maps each port listened on at 127.0.0.1 or every address,
// v4 or v6, to its sockets: from the kernel's listening sockets
// (proc.ListeningTCP), else, where sock_diag is not there, from
// /proc/net/tcp and tcp6 (an unreadable tcp6 is a node without IPv6).
func NodeListeners() (map[int][]Listener, error) {
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
func tcpListeners(path string) (map[int][]Listener, error) {
	rows, err := proc.ReadTCP(path)
	return loopbackListeners(rows), err
}

// loopbackListeners maps each port listened on at 127.0.0.1 or every
// address (v4 or v6) to its sockets.
func loopbackListeners(rows []proc.TCPSocket) map[int][]Listener {
	out := map[int][]Listener{}
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
		out[int(p)] = append(out[int(p)], Listener{row.Inode, row.UID})
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
	listen, err := NodeListeners()
	if err != nil {
		return fmt.Errorf("reading the node's listeners: %w", err)
	}
	for _, p := range ports {
		if len(listen[p]) == 0 {
			return fmt.Errorf("port %d on 127.0.0.1: no process of the job's cgroup listens on it", p)
		}
		for _, sk := range listen[p] {
			if !ours[sk.Inode] {
				return fmt.Errorf("port %d on 127.0.0.1 is listened on by a socket (uid %d) of no process in the job's cgroup", p, sk.UID)
			}
		}
	}
	return nil
}
