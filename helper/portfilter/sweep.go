package portfilter

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Orphans lists, with the nft program at nftPath, the jobs of cluster on
// node that have rules in the node's table but for which has(jobID) is
// false (no
// record dir of the job on the node: its epilog, or the sweep of its stale
// record, removed it without removing the rules, or the rules outlived a
// state dir removed by hand), each with the ports its rules keep. Such
// rules are harmful, not only untidy: once the job is gone its ports are
// free, and a later listener on one of them (an srun's own port for its
// step's launch answer among them) gets every connection reset. No table:
// none. Only chains named for cluster and node (Job.Chain) are the
// cluster's; another cluster's, whose node of the same name runs on this
// host, are never listed. Chains named the legacy way (Job.LegacyChain, no
// cluster in the name: a prolog before the upgrade) of node are listed
// with Legacy set: whose cluster they are the name cannot tell, and the
// caller decides. Errors: nft's, or output that is not its JSON.
func Orphans(ctx context.Context, nftPath, cluster, node string, has func(jobID uint32) bool) ([]Job, error) {
	listing, err := runNft(ctx, nftPath, "", "-j", "list", "table", "inet", Table)
	if err != nil {
		if strings.Contains(err.Error(), "No such file or directory") {
			return nil, nil
		}
		return nil, fmt.Errorf("nft list table inet %s: %w", Table, err)
	}
	return orphansIn(listing, cluster, node, has)
}

// orphansIn reads nft's JSON listing of the table (Orphans).
func orphansIn(listing []byte, cluster, node string, has func(jobID uint32) bool) ([]Job, error) {
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(listing, &doc); err != nil {
		return nil, fmt.Errorf("nft's listing of %s: %w", Table, err)
	}
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
	for _, obj := range doc.Nftables {
		if raw, ok := obj["chain"]; ok {
			var c struct{ Name string }
			if json.Unmarshal(raw, &c) == nil {
				if id, ok := jobOf(c.Name); ok {
					note(id)
				}
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
				if id, ok := jobOf(v.Jump.Target); ok {
					j := note(id)
					j.Ports = append(j.Ports, port)
				}
			}
		}
	}
	var orphans []Job
	for _, k := range order {
		if !has(k.id) {
			orphans = append(orphans, *jobs[k])
		}
	}
	return orphans, nil
}
