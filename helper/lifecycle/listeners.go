package lifecycle

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
// or the container runtime and its children): the socket inodes of
// /proc/net/tcp against the descriptors of those processes. A socket of
// this same user that is not in the group (a runtime that started the
// collector in a session of its own) is the job's user's, not a foreign
// one, and passes. Any other listener on such a port, or a port nobody
// listens on, is an error: the health check or the job's telemetry could
// be answered by another user.
func verifyListeners(pgid int, ports []int) error {
	ours := groupSockets(pgid)
	listen, err := tcpListeners("/proc/net/tcp")
	if err != nil {
		return fmt.Errorf("reading the node's listeners: %w", err)
	}
	if six, err := tcpListeners("/proc/net/tcp6"); err == nil {
		for p, socks := range six {
			listen[p] = append(listen[p], socks...)
		}
	}
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
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := proc.ReadStat(pid); err != nil || st.Pgid != pgid {
			continue
		}
		fds, _ := os.ReadDir(filepath.Join("/proc", e.Name(), "fd"))
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join("/proc", e.Name(), "fd", fd.Name()))
			if err != nil {
				continue
			}
			if s, ok := strings.CutPrefix(link, "socket:["); ok {
				if ino, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64); err == nil {
					out[ino] = true
				}
			}
		}
	}
	return out
}

// socket is one listening socket: its inode and owner.
type socket struct {
	inode uint64
	uid   uint32
}

func tcpListeners(path string) (map[int][]socket, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseTCP(io.LimitReader(f, 64<<20))
}

func parseTCP(r io.Reader) (map[int][]socket, error) {
	out := map[int][]socket{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[3] != "0A" {
			continue
		}
		addr, port, ok := strings.Cut(f[1], ":")
		switch {
		case !ok:
			continue
		case addr == "0100007F", addr == "00000000": // 127.0.0.1, 0.0.0.0
		case addr == "00000000000000000000000000000000", addr == "0000000000000000FFFF00000100007F": // ::, ::ffff:127.0.0.1
		default:
			continue
		}
		p, err1 := strconv.ParseUint(port, 16, 16)
		ino, err2 := strconv.ParseUint(f[9], 10, 64)
		uid, err3 := strconv.ParseUint(f[7], 10, 32)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		out[int(p)] = append(out[int(p)], socket{ino, uint32(uid)})
	}
	return out, sc.Err()
}
