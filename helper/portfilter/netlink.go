package portfilter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The job prolog's two writes to the node's table and the epilog's
// removal go to the kernel's nftables netlink interface directly, without
// the nft program: nft's exec, its library's start and its parse of the
// script took 10-30 ms at each prolog (32-74 ms on a slow host), on the
// path to the collector's start or beside it on a node of few CPUs, where
// one netlink transaction takes 1-2 ms. The rules are the very ones the
// nft scripts make (JobScript, tableScript: nft's own bytecode for them,
// read with nft --debug=netlink) but for the uids' match (a rule per uid
// where nft makes an anonymous set), so that nft lists them and removes
// them (Remove) as its own. The sweep lists the table through netlink too
// (Orphans, HeldPorts), with nft's JSON listing where netlink fails.

// netlinkTimeout bounds one netlink transaction. A commit that changes a
// base chain waits for the kernel's readers (15-20 ms on an idle node);
// Timeout's reasons hold for a loaded node.
const netlinkTimeout = Timeout

// AddJob installs j's rules in the node's table as it is, as JobScript
// does, in one netlink transaction (the kernel's commit: all or nothing):
// j's two chains made or flushed, their rules, and j's ports in the two
// maps. The cgroup's path is resolved to its id here, as nft resolves it
// (the directory's inode below CgroupMount). Errors: j not nameable
// (check), its group gone, the table or its maps not there (ENOENT: the
// node's first job, a table removed by hand; Install makes it), a port
// still in a map (ErrPortHeld: another job's, live, or stale where its
// epilog could not remove its rules), the kernel's refusal.
func AddJob(j Job) error {
	if err := j.check(); err != nil {
		return err
	}
	id, err := cgroupID(j.Group)
	if err != nil {
		return err
	}
	c, err := dial()
	if err != nil {
		return err
	}
	addJob(c, table(), j, id)
	if err := c.Flush(); err != nil {
		if errors.Is(err, syscall.EEXIST) {
			return fmt.Errorf("installing job %d's rules on ports %v: %w (%w)", j.ID, j.Ports, ErrPortHeld, err)
		}
		return fmt.Errorf("installing job %d's rules: %w", j.ID, err)
	}
	return nil
}

// ErrPortHeld marks AddJob's refusal of a port that the table keeps to
// another job already (the kernel's EEXIST for the map's entry).
var ErrPortHeld = errors.New("a port is kept to another job already")

// SetTable makes the node's table, its maps and base chains where they
// are not, and sets each base chain's one rule again, as tableScript
// does (EnsureTable), in one netlink transaction. Errors: the kernel's.
func SetTable() error {
	c, err := dial()
	if err != nil {
		return err
	}
	addTable(c)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("setting the table inet %s: %w", Table, err)
	}
	return nil
}

// dial is a netlink connection to the kernel's nftables whose
// transactions are bounded by netlinkTimeout.
func dial() (*nftables.Conn, error) {
	c, err := nftables.New(nftables.WithSockOptions(func(nc *netlink.Conn) error {
		return nc.SetDeadline(time.Now().Add(netlinkTimeout))
	}))
	if err != nil {
		return nil, fmt.Errorf("nftables netlink: %w", err)
	}
	return c, nil
}

// cgroupID is the id the kernel's socket cgroupv2 match compares for the
// group nft names path (relative to CgroupMount): the directory's inode
// number, as nft's parser takes it (nftables' datatype.c). Errors: the
// group not there.
func cgroupID(path string) (uint64, error) {
	var st syscall.Stat_t
	full := filepath.Join(CgroupMount, path)
	if err := syscall.Stat(full, &st); err != nil {
		return 0, fmt.Errorf("the job's cgroup: %w", &os.PathError{Op: "stat", Path: full, Err: err})
	}
	return st.Ino, nil
}

// table is the node's table as netlink names it.
func table() *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyINet, Name: Table}
}

// portMap is one of the table's two verdict maps, by name.
func portMap(t *nftables.Table, name string) *nftables.Set {
	return &nftables.Set{Table: t, Name: name, IsMap: true, KeyType: nftables.TypeInetService, DataType: nftables.TypeVerdict}
}

// port is a port as the maps key it (inet_service: network order).
func port(p int) []byte {
	return binaryutil.BigEndian.PutUint16(uint16(p))
}

// tcp is nft's implicit "meta l4proto tcp" before a transport header
// match or a tcp reset in an inet chain.
func tcp() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
	}
}

// reset is "reject with tcp reset".
func reset() []expr.Any {
	return append(tcp(), &expr.Reject{Type: unix.NFT_REJECT_TCP_RST, Code: 0})
}

// loopbackTCP is "ip daddr 127.0.0.1" and the implicit tcp of a port
// match that follows it.
func loopbackTCP() []expr.Any {
	return append([]expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{127, 0, 0, 1}},
	}, tcp()...)
}

// dportVmap is "tcp dport vmap @name".
func dportVmap(name string) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Lookup{SourceRegister: 1, DestRegister: 0, IsDestRegSet: true, SetName: name},
	}
}

// addTable queues tableScript's statements on c.
func addTable(c *nftables.Conn) {
	t := c.AddTable(table())
	for _, m := range []string{"out_ports", "in_ports"} {
		// A set's queueing fails only on flags it does not use here.
		_ = c.AddSet(portMap(t, m), nil)
	}
	accept := nftables.ChainPolicyAccept
	prio := nftables.ChainPriorityRef(*nftables.ChainPriorityFilter - 10)
	out := c.AddChain(&nftables.Chain{Table: t, Name: "output", Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookOutput, Priority: prio, Policy: &accept})
	in := c.AddChain(&nftables.Chain{Table: t, Name: "input", Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookInput, Priority: prio, Policy: &accept})
	c.FlushChain(out)
	c.FlushChain(in)
	c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: append(loopbackTCP(), dportVmap("out_ports")...)})
	// tcp flags & (syn | ack) == syn
	syn := []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{0x12}, Xor: []byte{0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0x02}},
	}
	c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: append(append(loopbackTCP(), syn...), dportVmap("in_ports")...)})
}

// addJob queues JobScript's statements for j on c, the group's id
// resolved (cgroupID).
func addJob(c *nftables.Conn, t *nftables.Table, j Job, group uint64) {
	ret := &expr.Verdict{Kind: expr.VerdictReturn}
	out := c.AddChain(&nftables.Chain{Table: t, Name: j.Chain("out")})
	c.FlushChain(out)
	// Root may connect (an admin's check of a job's collector); no other
	// uid but the job's. nft's "meta skuid { 0, uid }" is an anonymous
	// set; a rule per uid is the same match.
	for _, uid := range []uint32{0, j.UID} {
		c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeySKUID, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(uid)},
			ret,
		}})
		if j.UID == 0 {
			break
		}
	}
	c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: reset()})
	in := c.AddChain(&nftables.Chain{Table: t, Name: j.Chain("in")})
	c.FlushChain(in)
	id := make([]byte, 8)
	binary.NativeEndian.PutUint64(id, group)
	c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: []expr.Any{
		&expr.Socket{Key: expr.SocketKeyCgroupv2, Level: uint32(j.Level), Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: id},
		ret,
	}})
	c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: reset()})
	for _, m := range []struct{ name, chain string }{{"out_ports", out.Name}, {"in_ports", in.Name}} {
		elems := make([]nftables.SetElement, len(j.Ports))
		for i, p := range j.Ports {
			elems[i] = nftables.SetElement{Key: port(p), VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: m.chain}}
		}
		// Elements of a map with verdicts marshal without error.
		_ = c.SetAddElements(portMap(t, m.name), elems)
	}
}

// RemoveJob removes j's rules as Remove does, through netlink: j's ports
// from the two maps and j's two chains, one transaction; where that fails
// (some of it gone already: a second epilog, a sweep), each statement in
// a transaction of its own, what is not there being no error. Errors: the
// statements that failed for another reason than their object's absence.
func RemoveJob(j Job) error {
	t := table()
	ops := removeOps(t, j)
	c, err := dial()
	if err != nil {
		return err
	}
	for _, op := range ops {
		op(c)
	}
	if c.Flush() == nil {
		return nil
	}
	var errs []error
	for _, op := range ops {
		if c, err = dial(); err != nil {
			return err
		}
		op(c)
		if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeOps are removeStatements' statements, each queueing its message
// on a connection.
func removeOps(t *nftables.Table, j Job) []func(*nftables.Conn) {
	var ops []func(*nftables.Conn)
	for _, p := range j.Ports {
		for _, m := range []string{"out_ports", "in_ports"} {
			ops = append(ops, func(c *nftables.Conn) {
				// A key's element marshals without error.
				_ = c.SetDeleteElements(portMap(t, m), []nftables.SetElement{{Key: port(p)}})
			})
		}
	}
	for _, h := range []string{"out", "in"} {
		ch := &nftables.Chain{Table: t, Name: j.Chain(h)}
		ops = append(ops, func(c *nftables.Conn) { c.FlushChain(ch) }, func(c *nftables.Conn) { c.DelChain(ch) })
	}
	return ops
}

// HeldPorts returns the ports the node's table keeps to some job, live or
// stale (the in_ports map's keys), through netlink: a new job's ports are
// chosen among others, so that its rules never take over another job's
// port. No table: an error, as every failure to read (netlink's, the
// kernel's); the caller chooses without.
func HeldPorts() (map[int]bool, error) {
	c, err := dial()
	if err != nil {
		return nil, err
	}
	entries, err := inPorts(c)
	if err != nil {
		return nil, err
	}
	held := make(map[int]bool, len(entries))
	for _, e := range entries {
		held[e.port] = true
	}
	return held, nil
}

// inPorts lists the in_ports map's entries on c: each port, and the chain
// its verdict jumps to ("" for another verdict). Errors: netlink's.
func inPorts(c *nftables.Conn) ([]mapEntry, error) {
	elems, err := c.GetSetElements(portMap(table(), "in_ports"))
	if err != nil {
		return nil, fmt.Errorf("listing the ports of %s: %w", Table, err)
	}
	entries := make([]mapEntry, 0, len(elems))
	for _, e := range elems {
		if len(e.Key) >= 2 {
			var target string
			if t, ok := jumpTarget(e.Val); ok {
				target = t
			}
			entries = append(entries, mapEntry{int(binary.BigEndian.Uint16(e.Key)), target})
		}
	}
	return entries, nil
}
