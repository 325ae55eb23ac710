package portfilter

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Orphans lists, with the nft program at nftPath, the jobs of node that
// have rules in the node's table but for which has(jobID) is false (no
// record dir of the job on the node: its epilog, or the sweep of its stale
// record, removed it without removing the rules, or the rules outlived a
// state dir removed by hand), each with the ports its rules keep. Such
// rules are harmful, not only untidy: once the job is gone its ports are
// free, and a later listener on one of them (an srun's own port for its
// step's launch answer among them) gets every connection reset. No table:
// none. Errors: nft's, or output that is not its JSON.
func Orphans(ctx context.Context, nftPath, node string, has func(jobID uint32) bool) ([]Job, error) {
	listing, err := runNft(ctx, nftPath, "", "-j", "list", "table", "inet", Table)
	if err != nil {
		if strings.Contains(err.Error(), "No such file or directory") {
			return nil, nil
		}
		return nil, fmt.Errorf("nft list table inet %s: %w", Table, err)
	}
	return orphansIn(listing, node, has)
}

// orphansIn reads nft's JSON listing of the table (Orphans).
func orphansIn(listing []byte, node string, has func(jobID uint32) bool) ([]Job, error) {
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(listing, &doc); err != nil {
		return nil, fmt.Errorf("nft's listing of %s: %w", Table, err)
	}
	// This node's chain names end in "_<node as kept>_<hash>_<hook>": the
	// id is what stands before, after "job_".
	suffix := strings.TrimPrefix(Job{Node: node}.Chain("in"), "job_0")
	suffix = strings.TrimSuffix(suffix, "_in")
	jobOf := func(chain string) (uint32, bool) {
		for _, hook := range []string{"_in", "_out"} {
			rest, ok := strings.CutSuffix(chain, suffix+hook)
			if !ok {
				continue
			}
			id, err := strconv.ParseUint(strings.TrimPrefix(rest, "job_"), 10, 32)
			if err == nil && strings.HasPrefix(rest, "job_") {
				return uint32(id), true
			}
		}
		return 0, false
	}
	jobs := map[uint32]*Job{}
	var order []uint32
	note := func(id uint32) *Job {
		if jobs[id] == nil {
			jobs[id] = &Job{ID: id, Node: node}
			order = append(order, id)
		}
		return jobs[id]
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
	for _, id := range order {
		if !has(id) {
			orphans = append(orphans, *jobs[id])
		}
	}
	return orphans, nil
}
