package portfilter

import (
	"os"
	"slices"
	"testing"
)

// orphansIn reads nft's own JSON listing of a node's table (recorded from
// nft 1.0.6 with two jobs of node gn2, 7 and 85): the
// jobs of the asked node without a record dir are orphans, with the ports
// their rules keep; another node's jobs are never its.
func TestOrphansIn(t *testing.T) {
	listing, err := os.ReadFile("testdata/listing.json")
	if err != nil {
		t.Fatal(err)
	}
	live := func(id uint32) bool { return id == 85 }
	got, err := orphansIn(listing, "gn2", live)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != 7 || got[0].Node != "gn2" {
		t.Fatalf("orphans of gn2: %+v, want job 7 alone", got)
	}
	slices.Sort(got[0].Ports)
	if want := []int{33605, 38737, 39693, 39759, 42171, 44011, 46697}; !slices.Equal(got[0].Ports, want) {
		t.Errorf("job 7's ports %v, want %v", got[0].Ports, want)
	}
	if got, _ := orphansIn(listing, "gn2", func(uint32) bool { return false }); len(got) != 2 || len(got[0].Ports) != 7 || len(got[1].Ports) != 7 {
		t.Errorf("orphans of gn2 with no job live: %+v, want jobs 7 and 85 with 7 ports each", got)
	}
	// gn20's chains would be job_<id>_gn20_<its hash>_...: not gn2's.
	for _, node := range []string{"gn1", "gn20", "gn"} {
		if got, _ := orphansIn(listing, node, func(uint32) bool { return false }); len(got) != 0 {
			t.Errorf("%s has no rules, got %+v", node, got)
		}
	}
	if _, err := orphansIn([]byte("not json"), "gn2", live); err == nil {
		t.Error("a listing that is not JSON was read")
	}
}
