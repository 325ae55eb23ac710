package proc

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Pids are the pids /proc lists (its numeric entries), in /proc order.
// Errors: /proc cannot be read.
func Pids() ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, len(ents))
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// Comm is the command name of pid (/proc/<pid>/comm, at most 15 bytes,
// surrounding space trimmed). Errors: the read's (os.ErrNotExist once the
// process is gone).
func Comm(pid int) (string, error) {
	c, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(c)), nil
}

// Owner is the uid that owns /proc/<pid>: the process's effective uid, or
// root's for a process that is not dumpable. Errors: no such process.
func Owner(pid int) (uint32, error) {
	var fi syscall.Stat_t
	if err := syscall.Stat(filepath.Join("/proc", strconv.Itoa(pid)), &fi); err != nil {
		return 0, err
	}
	return fi.Uid, nil
}

// Cmdline is /proc/<pid>/cmdline: the arguments, each ended by a NUL byte.
// Errors: the read's.
func Cmdline(pid int) ([]byte, error) {
	return os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
}

// Environ is /proc/<pid>/environ: the environment pid was started with,
// NAME=value entries each ended by a NUL byte; only its own user (or root)
// may read it. Errors: the read's.
func Environ(pid int) ([]byte, error) {
	return os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
}

// SocketInodes are the inodes of the sockets pid holds open (the
// socket:[<inode>] links of /proc/<pid>/fd), as far as this process may
// read them; none when it may not.
func SocketInodes(pid int) []uint64 {
	out, _ := ReadSocketInodes(pid)
	return out
}

// ReadSocketInodes is SocketInodes with the error of reading pid's
// descriptor dir (fs.ErrNotExist: pid is gone; fs.ErrPermission: a
// process of another user, or one that is not dumpable, to a reader
// without CAP_SYS_PTRACE).
func ReadSocketInodes(pid int) ([]uint64, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	fds, err := os.ReadDir(dir)
	var out []uint64
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(dir, fd.Name()))
		if err != nil {
			continue
		}
		if s, ok := strings.CutPrefix(link, "socket:["); ok {
			if ino, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64); err == nil {
				out = append(out, ino)
			}
		}
	}
	return out, err
}

// BootTime is when this node booted (the btime line of /proc/stat); zero
// when unknown.
func BootTime() time.Time {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n > 0 {
				return time.Unix(n, 0)
			}
		}
	}
	return time.Time{}
}

// TCPSocket is one row of /proc/net/tcp or /proc/net/tcp6 (proc_net_tcp(5)).
type TCPSocket struct {
	// Local and Remote are the addresses as the kernel writes them: the
	// address in hex, in the host's byte order per 32-bit word, a colon,
	// the port in hex (0100007F:1F90 is 127.0.0.1:8080).
	Local, Remote string
	// State is the state in hex: "0A" is LISTEN, "01" ESTABLISHED.
	State string
	// UID owns the socket; Inode names it (the socket:[<inode>] links of
	// /proc/<pid>/fd).
	UID   uint32
	Inode uint64
}

// The node's TCP socket tables, IPv4 and IPv6 (for ReadTCP).
const (
	NetTCP  = "/proc/net/tcp"
	NetTCP6 = "/proc/net/tcp6"
)

// MaxTCPTable bounds what ReadTCP reads of one table, bytes.
const MaxTCPTable = 64 << 20

// ReadTCP reads the sockets of the table at path (/proc/net/tcp or
// /proc/net/tcp6), at most MaxTCPTable bytes of it. Errors: the read's.
func ReadTCP(path string) ([]TCPSocket, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseTCP(io.LimitReader(f, MaxTCPTable))
}

// ParseTCP parses the text of /proc/net/tcp or tcp6: the header and rows
// whose uid or inode is not a number are skipped. Errors: the reader's.
func ParseTCP(r io.Reader) ([]TCPSocket, error) {
	var out []TCPSocket
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		f := strings.Fields(sc.Text())
		if len(f) < 10 {
			continue
		}
		uid, err1 := strconv.ParseUint(f[7], 10, 32)
		ino, err2 := strconv.ParseUint(f[9], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, TCPSocket{Local: f[1], Remote: f[2], State: f[3], UID: uint32(uid), Inode: ino})
	}
	return out, sc.Err()
}
