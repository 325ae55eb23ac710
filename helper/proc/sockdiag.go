package proc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// ListeningTCP returns the node's listening TCP sockets, IPv4 and IPv6, as
// ReadTCP would read them from NetTCP and NetTCP6 (the same text form of
// Local and Remote, State "0A"), asked of the kernel over NETLINK_SOCK_DIAG
// with the state filter LISTEN: the kernel then walks its listening
// sockets only, where reading the tables walks every connection of the
// node (thousands on a busy one, milliseconds each time). Errors: the
// netlink socket's (no sock_diag in this kernel or sandbox): the caller
// reads the tables instead.
func ListeningTCP() ([]TCPSocket, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_INET_DIAG)
	if err != nil {
		return nil, os.NewSyscallError("socket(NETLINK_INET_DIAG)", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, os.NewSyscallError("bind(NETLINK_INET_DIAG)", err)
	}
	var out []TCPSocket
	for i, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		rows, err := diagDump(fd, family, uint32(i+1))
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	return out, nil
}

// Sizes of struct nlmsghdr, inet_diag_req_v2 and inet_diag_msg
// (linux/inet_diag.h).
const (
	nlmsgHdrLen    = 16
	diagReqLen     = 56
	diagMsgLen     = 72
	tcpListenState = 10 // TCP_LISTEN
)

// maxDiagBytes bounds one dump's replies.
const maxDiagBytes = 64 << 20

// diagDump asks for family's listening TCP sockets and reads the dump.
func diagDump(fd int, family uint8, seq uint32) ([]TCPSocket, error) {
	req := make([]byte, nlmsgHdrLen+diagReqLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(req[8:], seq)
	r := req[nlmsgHdrLen:]
	r[0] = family
	r[1] = unix.IPPROTO_TCP
	ne.PutUint32(r[4:], 1<<tcpListenState) // idiag_states
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, os.NewSyscallError("sendto(NETLINK_INET_DIAG)", err)
	}
	var out []TCPSocket
	buf := make([]byte, 64<<10)
	read := 0
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, os.NewSyscallError("recvfrom(NETLINK_INET_DIAG)", err)
		}
		if read += n; read > maxDiagBytes {
			return nil, fmt.Errorf("sock_diag: more than %d bytes of listening sockets", maxDiagBytes)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, fmt.Errorf("sock_diag: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if errno := int32(ne.Uint32(m.Data)); errno < 0 {
						return nil, os.NewSyscallError("sock_diag", syscall.Errno(-errno))
					}
				}
				return nil, errors.New("sock_diag: an error reply")
			case unix.SOCK_DIAG_BY_FAMILY:
				if s, ok := diagSocket(m.Data); ok {
					out = append(out, s)
				}
			}
		}
	}
}

// diagSocket is one inet_diag_msg in ReadTCP's form.
func diagSocket(d []byte) (TCPSocket, bool) {
	if len(d) < diagMsgLen {
		return TCPSocket{}, false
	}
	ne := binary.NativeEndian
	family, state := d[0], d[1]
	id := d[4:52] // inet_diag_sockid
	sport, dport := binary.BigEndian.Uint16(id[0:]), binary.BigEndian.Uint16(id[2:])
	words := 1
	if family == unix.AF_INET6 {
		words = 4
	}
	// /proc/net/tcp{,6} print each 32-bit word of the address as the
	// host reads it, in hex.
	addr := func(b []byte, port uint16) string {
		s := ""
		for w := 0; w < words; w++ {
			s += fmt.Sprintf("%08X", ne.Uint32(b[4*w:]))
		}
		return fmt.Sprintf("%s:%04X", s, port)
	}
	return TCPSocket{
		Local:  addr(id[4:20], sport),
		Remote: addr(id[20:36], dport),
		State:  fmt.Sprintf("%02X", state),
		UID:    ne.Uint32(d[64:]),
		Inode:  uint64(ne.Uint32(d[68:])),
	}, true
}
