package portfilter

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"testing"
)

// orphansIn reads nft's own JSON listing of a node's table (recorded from
// nft 1.0.6 with two jobs of node gn2, 7 and 85, whose chains are named the
// legacy way, without the cluster): the jobs of the asked node without a
// record dir are orphans, with the ports their rules keep, marked Legacy;
// another node's jobs are never its.
func TestOrphansIn(t *testing.T) {
	listing, err := os.ReadFile("testdata/listing.json")
	if err != nil {
		t.Fatal(err)
	}
	live := func(id uint32) bool { return id == 85 }
	got, err := orphansIn(listing, "c1", "gn2", live)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != 7 || got[0].Node != "gn2" || !got[0].Legacy || got[0].Cluster != "" {
		t.Fatalf("orphans of gn2: %+v, want job 7 alone, legacy", got)
	}
	if got[0].Chain("in") != "job_7_gn2_aaeca3e8_in" {
		t.Errorf("the legacy orphan's chain %s, want the listed job_7_gn2_aaeca3e8_in", got[0].Chain("in"))
	}
	slices.Sort(got[0].Ports)
	if want := []int{33605, 38737, 39693, 39759, 42171, 44011, 46697}; !slices.Equal(got[0].Ports, want) {
		t.Errorf("job 7's ports %v, want %v", got[0].Ports, want)
	}
	if got, _ := orphansIn(listing, "c1", "gn2", func(uint32) bool { return false }); len(got) != 2 || len(got[0].Ports) != 7 || len(got[1].Ports) != 7 {
		t.Errorf("orphans of gn2 with no job live: %+v, want jobs 7 and 85 with 7 ports each", got)
	}
	// gn20's chains would be job_<id>_gn20_<its hash>_...: not gn2's.
	for _, node := range []string{"gn1", "gn20", "gn"} {
		if got, _ := orphansIn(listing, "c1", node, func(uint32) bool { return false }); len(got) != 0 {
			t.Errorf("%s has no rules, got %+v", node, got)
		}
	}
	if _, err := orphansIn([]byte("not json"), "c1", "gn2", live); err == nil {
		t.Error("a listing that is not JSON was read")
	}
}

// listingOf is nft's JSON listing (the shape of testdata/listing.json) of a
// table that holds jobs' chains and their ports in the two maps.
func listingOf(t *testing.T, jobs ...Job) []byte {
	t.Helper()
	var objs []any
	objs = append(objs, map[string]any{"table": map[string]any{"family": "inet", "name": Table}})
	for _, m := range []struct{ name, hook string }{{"out_ports", "out"}, {"in_ports", "in"}} {
		var elem []any
		for _, j := range jobs {
			for _, p := range j.Ports {
				elem = append(elem, []any{p, map[string]any{"jump": map[string]any{"target": j.Chain(m.hook)}}})
			}
		}
		objs = append(objs, map[string]any{"map": map[string]any{"family": "inet", "name": m.name, "table": Table, "type": "inet_service", "map": "verdict", "elem": elem}})
	}
	for _, j := range jobs {
		for _, h := range []string{"out", "in"} {
			objs = append(objs, map[string]any{"chain": map[string]any{"family": "inet", "table": Table, "name": j.Chain(h)}})
		}
	}
	b, err := json.Marshal(map[string]any{"nftables": objs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Two clusters with a node of the same name on one host share the node's
// table: each one's sweep lists its own orphans and never the other's,
// whatever the job ids; chains named the legacy way are listed as such.
func TestOrphansOfCluster(t *testing.T) {
	mine := Job{ID: 7, Cluster: "c1", Node: "gn1", Ports: []int{40001, 40002}}
	theirs := Job{ID: 7, Cluster: "c2", Node: "gn1", Ports: []int{40003}}
	// A cluster whose name keeps to the same text as c1's ("c_1" and
	// "c.1"), and one whose name only differs beyond the kept length.
	lookalike := Job{ID: 8, Cluster: "c.1", Node: "gn1", Ports: []int{40004}}
	long := "cluster-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	longA := Job{ID: 9, Cluster: long + "A", Node: "gn1", Ports: []int{40005}}
	longB := Job{ID: 9, Cluster: long + "B", Node: "gn1", Ports: []int{40006}}
	legacy := Job{ID: 6, Node: "gn1", Legacy: true, Ports: []int{40007}}
	other := Job{ID: 5, Cluster: "c1", Node: "gn10", Ports: []int{40008}}
	listing := listingOf(t, mine, theirs, lookalike, longA, longB, legacy, other)
	none := func(uint32) bool { return false }

	ids := func(js []Job) (out []string) {
		for _, j := range js {
			out = append(out, j.Chain("in"))
		}
		return out
	}
	got, err := orphansIn(listing, "c1", "gn1", none)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{mine.Chain("in"), legacy.Chain("in")}; !slices.Equal(ids(got), want) {
		t.Errorf("c1's orphans on gn1: %v, want %v", ids(got), want)
	}
	for _, j := range got {
		if j.ID == 7 && (!slices.Equal(j.Ports, mine.Ports) || j.Legacy || j.Cluster != "c1") {
			t.Errorf("c1's job 7: %+v", j)
		}
	}
	got, _ = orphansIn(listing, "c2", "gn1", none)
	if want := []string{theirs.Chain("in"), legacy.Chain("in")}; !slices.Equal(ids(got), want) {
		t.Errorf("c2's orphans on gn1: %v, want %v", ids(got), want)
	}
	got, _ = orphansIn(listing, long+"A", "gn1", none)
	if want := []string{longA.Chain("in"), legacy.Chain("in")}; !slices.Equal(ids(got), want) {
		t.Errorf("%s's orphans on gn1: %v, want %v", long+"A", ids(got), want)
	}
	got, _ = orphansIn(listing, "c1", "gn1", func(id uint32) bool { return id == 7 })
	if want := []string{legacy.Chain("in")}; !slices.Equal(ids(got), want) {
		t.Errorf("c1's orphans on gn1 with job 7 live: %v, want %v", ids(got), want)
	}
}

// A chain name holds the cluster and the node, kept to nft's names and
// bounded; names that keep to the same text differ by their hash; the
// legacy name is the one prologs gave before.
func TestChainNames(t *testing.T) {
	j := Job{ID: 4294967295, Cluster: "c1", Node: "gn1"}
	if got := j.Chain("in"); !regexpMatch(`^job_4294967295_c1_gn1_[0-9a-f]{8}_in$`, got) {
		t.Errorf("chain %s", got)
	}
	if got := (Job{ID: 42, Node: "gn1", Legacy: true}).Chain("out"); got != "job_42_gn1_68aa6849_out" {
		t.Errorf("legacy chain %s, want job_42_gn1_68aa6849_out (the name before the cluster)", got)
	}
	long := ""
	for len(long) < 300 {
		long += "x.y-z/"
	}
	k := Job{ID: 4294967295, Cluster: long, Node: long}
	if got := k.Chain("out"); len(got) > 101 || !regexpMatch(`^job_4294967295_x_y_z_[x_yz]+_x_y_z_[x_yz]+_[0-9a-f]{8}_out$`, got) {
		t.Errorf("chain of long names: %s (%d bytes), want at most 101 of letters, digits and _", got, len(got))
	}
	for _, pair := range [][2]Job{
		{{ID: 1, Cluster: "c.1", Node: "n"}, {ID: 1, Cluster: "c_1", Node: "n"}},
		{{ID: 1, Cluster: "a_b", Node: "c"}, {ID: 1, Cluster: "a", Node: "b_c"}},
		{{ID: 1, Cluster: long + "1", Node: "n"}, {ID: 1, Cluster: long + "2", Node: "n"}},
		{{ID: 1, Cluster: "", Node: "n"}, {ID: 1, Node: "n", Legacy: true}},
	} {
		if pair[0].Chain("in") == pair[1].Chain("in") {
			t.Errorf("%+v and %+v share the chain %s", pair[0], pair[1], pair[0].Chain("in"))
		}
	}
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }
