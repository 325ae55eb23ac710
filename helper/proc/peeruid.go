package proc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// UnixPeerUID is the uid of the process at the other end of c, a Unix
// stream connection (SO_PEERCRED: the credentials the kernel took at
// connect or listen, which the peer cannot forge). ok is false when the
// kernel cannot tell: a caller that admits by uid refuses then.
func UnixPeerUID(c *net.UnixConn) (uid uint32, ok bool) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil || cerr != nil || cred == nil {
		return 0, false
	}
	return cred.Uid, true
}

// ErrNoSocket is TCPSocketUID's and TCPPeerUID's error when the node has
// no TCP socket of that address pair (its owner closed it).
var ErrNoSocket = errors.New("no TCP socket of that address pair")

// TCPPeerUID returns the uid owning the other end of c, a TCP connection
// of this process over loopback (or any address of this node): the socket
// whose own address is c's remote one and whose peer is c's local one. It
// asks the kernel for that one socket over NETLINK_SOCK_DIAG
// (TCPSocketUID); only when no netlink socket can be had (no sock_diag in
// this kernel or sandbox) does it read /proc/net/tcp and /proc/net/tcp6.
// Errors: ErrNoSocket (wrapped) when there is no such socket, the lookup's
// when it cannot be made, and one for a c that is not TCP. A caller that
// admits by uid refuses on every error.
func TCPPeerUID(c net.Conn) (uint32, error) {
	la, ok1 := c.LocalAddr().(*net.TCPAddr)
	ra, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return 0, fmt.Errorf("not a TCP connection: %v -> %v", c.RemoteAddr(), c.LocalAddr())
	}
	peer, own := ra.AddrPort(), la.AddrPort()
	uid, err := TCPSocketUID(peer, own)
	var se *os.SyscallError
	if err == nil || errors.Is(err, ErrNoSocket) || !errors.As(err, &se) || se.Syscall != "socket(NETLINK_INET_DIAG)" {
		return uid, err
	}
	return tableSocketUID(peer, own, err)
}

// TCPSocketUID returns the uid (inet_diag_msg.idiag_uid) owning the TCP
// socket whose own address is local and whose peer is remote, asked of the
// kernel over NETLINK_SOCK_DIAG for that one socket (inet_diag_req_v2
// without NLM_F_DUMP: the kernel's inet_diag_find_one_icsk hashes the
// address pair, whatever the node's number of connections). An IPv4 pair
// is asked as AF_INET, then as AF_INET6 with the IPv4-mapped addresses
// (which the kernel looks up as the IPv4 pair): an AF_INET6 socket
// connected to ::ffff:127.0.0.1 is found either way. The reply must name
// the same pair (a listener the kernel falls back to for a pair it no
// longer has is not it). Errors: ErrNoSocket (wrapped) when the kernel has
// no such socket; *os.SyscallError when the netlink socket cannot be
// opened or used.
func TCPSocketUID(local, remote netip.AddrPort) (uint32, error) {
	local = netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
	remote = netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())
	if local.Addr().Is4() != remote.Addr().Is4() {
		return 0, fmt.Errorf("%v and %v: one IPv4, one IPv6: %w", local, remote, ErrNoSocket)
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_INET_DIAG)
	if err != nil {
		return 0, os.NewSyscallError("socket(NETLINK_INET_DIAG)", err)
	}
	defer unix.Close(fd)
	// The kernel answers an exact request at once; this only bounds a
	// reply that never comes.
	tv := unix.NsecToTimeval(int64(time.Second))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return 0, os.NewSyscallError("setsockopt(NETLINK_INET_DIAG)", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, os.NewSyscallError("bind(NETLINK_INET_DIAG)", err)
	}
	families := []uint8{unix.AF_INET6}
	if local.Addr().Is4() {
		families = []uint8{unix.AF_INET, unix.AF_INET6}
	}
	for i, family := range families {
		uid, err := diagExact(fd, family, local, remote, uint32(i+1))
		if errors.Is(err, ErrNoSocket) && i+1 < len(families) {
			continue
		}
		return uid, err
	}
	return 0, ErrNoSocket // not reached
}

// diagExact asks for the one socket local <-> remote as family (an IPv4
// pair asked as AF_INET6 is sent IPv4-mapped) and reads the answer.
func diagExact(fd int, family uint8, local, remote netip.AddrPort, seq uint32) (uint32, error) {
	req := make([]byte, nlmsgHdrLen+diagReqLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(req[8:], seq)
	r := req[nlmsgHdrLen:]
	r[0] = family
	r[1] = unix.IPPROTO_TCP
	ne.PutUint32(r[4:], ^uint32(0)) // idiag_states: any (an exact lookup ignores it)
	id := r[8:]                     // inet_diag_sockid
	binary.BigEndian.PutUint16(id[0:], local.Port())
	binary.BigEndian.PutUint16(id[2:], remote.Port())
	putAddr(id[4:20], family, local.Addr())
	putAddr(id[20:36], family, remote.Addr())
	// idiag_if 0 (id[36:40]); idiag_cookie INET_DIAG_NOCOOKIE: both
	// words ~0, so the kernel does not compare a cookie.
	ne.PutUint32(id[40:], ^uint32(0))
	ne.PutUint32(id[44:], ^uint32(0))
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, os.NewSyscallError("sendto(NETLINK_INET_DIAG)", err)
	}
	buf := make([]byte, 8<<10)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, os.NewSyscallError("recvfrom(NETLINK_INET_DIAG)", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return 0, fmt.Errorf("sock_diag: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					switch errno := int32(ne.Uint32(m.Data)); {
					case errno == -int32(unix.ENOENT):
						return 0, fmt.Errorf("%v <- %v: %w", local, remote, ErrNoSocket)
					case errno < 0:
						return 0, os.NewSyscallError("sock_diag", syscall.Errno(-errno))
					}
				}
				return 0, errors.New("sock_diag: an error reply")
			case unix.NLMSG_DONE:
				return 0, fmt.Errorf("%v <- %v: %w", local, remote, ErrNoSocket)
			case unix.SOCK_DIAG_BY_FAMILY:
				s, ok := diagPair(m.Data)
				if !ok || s.local != local || s.remote != remote || s.state == tcpListenState {
					return 0, fmt.Errorf("%v <- %v: the kernel answered with another socket: %w", local, remote, ErrNoSocket)
				}
				if s.inode == 0 {
					// No file holds it: a TIME_WAIT socket (reported as
					// uid 0), or one its owner closed (an orphan).
					return 0, fmt.Errorf("%v <- %v: closed by its owner (state %d): %w", local, remote, s.state, ErrNoSocket)
				}
				return s.uid, nil
			}
		}
	}
}

// putAddr writes a in the 16 bytes of an inet_diag_sockid address as
// family wants it: IPv4 in the first word, IPv6 (an IPv4 address mapped)
// in all four.
func putAddr(b []byte, family uint8, a netip.Addr) {
	if family == unix.AF_INET {
		a4 := a.As4()
		copy(b, a4[:])
		return
	}
	a16 := a.As16() // an IPv4 address comes out IPv4-mapped
	copy(b, a16[:])
}

// diagAnswer is what diagExact compares of an inet_diag_msg.
type diagAnswer struct {
	local, remote netip.AddrPort
	state         uint8
	uid           uint32
	inode         uint32
}

// diagPair reads an inet_diag_msg's address pair (IPv4-mapped addresses
// unmapped), state and uid.
func diagPair(d []byte) (diagAnswer, bool) {
	if len(d) < diagMsgLen {
		return diagAnswer{}, false
	}
	family, state := d[0], d[1]
	id := d[4:52]
	addr := func(b []byte) netip.Addr {
		if family == unix.AF_INET {
			return netip.AddrFrom4([4]byte(b[:4]))
		}
		return netip.AddrFrom16([16]byte(b[:16])).Unmap()
	}
	return diagAnswer{
		local:  netip.AddrPortFrom(addr(id[4:20]), binary.BigEndian.Uint16(id[0:])),
		remote: netip.AddrPortFrom(addr(id[20:36]), binary.BigEndian.Uint16(id[2:])),
		state:  state,
		uid:    binary.NativeEndian.Uint32(d[64:]),
		inode:  binary.NativeEndian.Uint32(d[68:]),
	}, true
}

// tableSocketUID finds local <-> remote in /proc/net/tcp and, for an
// IPv4 pair, as its IPv4-mapped form in /proc/net/tcp6 (an AF_INET6
// socket connected to ::ffff:127.0.0.1 is listed there only), reading
// both whole tables: the way without sock_diag (why says why). Errors:
// ErrNoSocket (wrapped) when neither table has the pair.
func tableSocketUID(local, remote netip.AddrPort, why error) (uint32, error) {
	text := func(a netip.AddrPort, v6 bool) string {
		ne := binary.NativeEndian
		if !v6 {
			b := a.Addr().As4()
			return fmt.Sprintf("%08X:%04X", ne.Uint32(b[:]), a.Port())
		}
		b := a.Addr().As16()
		return fmt.Sprintf("%08X%08X%08X%08X:%04X", ne.Uint32(b[0:]), ne.Uint32(b[4:]), ne.Uint32(b[8:]), ne.Uint32(b[12:]), a.Port())
	}
	var errs []error
	for _, t := range []struct {
		path string
		v6   bool
	}{{NetTCP, false}, {NetTCP6, true}} {
		if !t.v6 && !local.Addr().Is4() {
			continue
		}
		rows, err := ReadTCP(t.path) // what was read before an error
		if err != nil {
			errs = append(errs, err)
		}
		l, r := text(local, t.v6), text(remote, t.v6)
		for _, row := range rows {
			if row.Local == l && row.Remote == r && row.State != "0A" && row.Inode != 0 {
				return row.UID, nil
			}
		}
	}
	return 0, fmt.Errorf("%v <- %v (no sock_diag: %v; %v): %w", local, remote, why, errors.Join(errs...), ErrNoSocket)
}
