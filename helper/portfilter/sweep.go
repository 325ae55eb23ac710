package portfilter

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Orphans lists the jobs of cluster on node that have rules in the node's
// table but for which has(jobID) is false (no record dir of the job on the
// node: its epilog, or the sweep of its stale record, removed it without
// removing the rules, or the rules outlived a state dir removed by hand),
// each with the ports its rules keep (ascending). Such rules are harmful, not only
// untidy: once the job is gone its ports are free, and a later listener on
// one of them gets every connection reset. The table is read through
// netlink (listed, its chains and the in_ports map), else with the nft
// program at nftPath ("": netlink only). No table: none. Only chains named
// for cluster and node (Job.Chain) are the cluster's; another cluster's,
// whose node of the same name runs on this host, are never listed. Chains
// named the legacy way (Job.LegacyChain, no cluster in the name: a prolog
// before the upgrade) of node are listed with Legacy set: whose cluster
// they are the name cannot tell, and the caller decides. Errors: nft's, or
// output that is not its JSON, where netlink failed too.
func Orphans(ctx context.Context, nftPath, cluster, node string, has func(jobID uint32) bool) ([]Job, error) {
	l, err := listNetlink()
	if err == nil {
		return l.orphans(cluster, node, has), nil
	}
	if errors.Is(err, errNoTable) {
		return nil, nil
	}
	if nftPath == "" {
		return nil, err
	}
	listing, err := runNft(ctx, nftPath, "", "-j", "list", "table", "inet", Table)
	if err != nil {
		if strings.Contains(err.Error(), "No such file or directory") {
			return nil, nil
		}
		return nil, fmt.Errorf("nft list table inet %s: %w", Table, err)
	}
	return orphansIn(listing, cluster, node, has)
}

// tableListing is what the sweep reads of the node's table: its chains'
// names and the in_ports map's entries.
type tableListing struct {
	chains  []string
	entries []mapEntry
}

// mapEntry is one entry of the in_ports map: a port and the chain its
// verdict jumps to.
type mapEntry struct {
	port   int
	target string
}

// errNoTable is listNetlink's error for a node without the table.
var errNoTable = errors.New("no table " + Table)

// listNetlink reads the node's table through netlink: its chains (of the
// inet family, this table's) and the in_ports map's jump entries.
// Errors: errNoTable, netlink's.
func listNetlink() (tableListing, error) {
	var l tableListing
	c, err := dial()
	if err != nil {
		return l, err
	}
	if _, err := c.ListTableOfFamily(Table, nftables.TableFamilyINet); err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return l, errNoTable
		}
		return l, fmt.Errorf("listing table %s: %w", Table, err)
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return l, fmt.Errorf("listing the chains of %s: %w", Table, err)
	}
	for _, ch := range chains {
		if ch.Table != nil && ch.Table.Name == Table {
			l.chains = append(l.chains, ch.Name)
		}
	}
	entries, err := inPorts(c)
	if err != nil {
		return l, err
	}
	for _, e := range entries {
		if e.target != "" {
			l.entries = append(l.entries, e)
		}
	}
	return l, nil
}

// jumpTarget reads a verdict map entry's data as the netlink library
// leaves it (the NFTA_DATA_VERDICT attribute's content, not decoded):
// NFTA_VERDICT_CODE and NFTA_VERDICT_CHAIN. ok only for a jump.
func jumpTarget(val []byte) (chain string, ok bool) {
	ad, err := netlink.NewAttributeDecoder(val)
	if err != nil {
		return "", false
	}
	ad.ByteOrder = binary.BigEndian
	jump := false
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_VERDICT_CODE:
			jump = int32(ad.Uint32()) == unix.NFT_JUMP
		case unix.NFTA_VERDICT_CHAIN:
			chain = ad.String()
		}
	}
	return chain, ad.Err() == nil && jump && chain != ""
}

// orphansIn reads nft's JSON listing of the table (Orphans).
func orphansIn(listing []byte, cluster, node string, has func(jobID uint32) bool) ([]Job, error) {
	l, err := parseListing(listing)
	if err != nil {
		return nil, err
	}
	return l.orphans(cluster, node, has), nil
}

// parseListing reads nft's JSON listing of the table.
func parseListing(listing []byte) (tableListing, error) {
	var l tableListing
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(listing, &doc); err != nil {
		return l, fmt.Errorf("nft's listing of %s: %w", Table, err)
	}
	for _, obj := range doc.Nftables {
		if raw, ok := obj["chain"]; ok {
			var c struct{ Name string }
			if json.Unmarshal(raw, &c) == nil {
				l.chains = append(l.chains, c.Name)
			}
		}
		if raw, ok := obj["map"]; ok {
			var m struct {
				Name string            `json:"name"`
				Elem []json.RawMessage `json:"elem"`
			}
			if json.Unmarshal(raw, &m) != nil || m.Name != "in_ports" {
				continue
			}
			for _, e := range m.Elem {
				// [port, {"jump": {"target": "<chain>"}}]
				var pair []json.RawMessage
				var port int
				var v struct {
					Jump struct{ Target string } `json:"jump"`
				}
				if json.Unmarshal(e, &pair) != nil || len(pair) != 2 || json.Unmarshal(pair[0], &port) != nil || json.Unmarshal(pair[1], &v) != nil {
					continue
				}
				l.entries = append(l.entries, mapEntry{port, v.Jump.Target})
			}
		}
	}
	return l, nil
}

// orphans is Orphans of a listing.
func (l tableListing) orphans(cluster, node string, has func(jobID uint32) bool) []Job {
	// The cluster's chain names on this node end in
	// "_<cluster as kept>_<node as kept>_<hash>_<hook>", the legacy ones in
	// "_<node as kept>_<hash of the node>_<hook>": the id is what stands
	// before, after "job_". The two hashes are of different texts, so no
	// name has both suffixes but by a collision of 32 bits.
	suffixOf := func(j Job) string {
		return strings.TrimSuffix(strings.TrimPrefix(j.Chain("in"), "job_0"), "_in")
	}
	suffixes := []struct {
		suffix string
		legacy bool
	}{
		{suffixOf(Job{Cluster: cluster, Node: node}), false},
		{suffixOf(Job{Node: node, Legacy: true}), true},
	}
	type key struct {
		id     uint32
		legacy bool
	}
	jobOf := func(chain string) (key, bool) {
		for _, s := range suffixes {
			for _, hook := range []string{"_in", "_out"} {
				rest, ok := strings.CutSuffix(chain, s.suffix+hook)
				if !ok {
					continue
				}
				digits, ok := strings.CutPrefix(rest, "job_")
				id, err := strconv.ParseUint(digits, 10, 32)
				if ok && err == nil {
					return key{uint32(id), s.legacy}, true
				}
			}
		}
		return key{}, false
	}
	jobs := map[key]*Job{}
	var order []key
	note := func(k key) *Job {
		if jobs[k] == nil {
			jobs[k] = &Job{ID: k.id, Cluster: cluster, Node: node, Legacy: k.legacy}
			if k.legacy {
				jobs[k].Cluster = ""
			}
			order = append(order, k)
		}
		return jobs[k]
	}
	for _, c := range l.chains {
		if id, ok := jobOf(c); ok {
			note(id)
		}
	}
	for _, e := range l.entries {
		if id, ok := jobOf(e.target); ok {
			j := note(id)
			j.Ports = append(j.Ports, e.port)
		}
	}
	var orphans []Job
	for _, k := range order {
		if !has(k.id) {
			j := *jobs[k]
			slices.Sort(j.Ports) // as nft lists a map; netlink, in the kernel's order
			orphans = append(orphans, j)
		}
	}
	return orphans
}
