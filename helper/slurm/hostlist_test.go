package slurm

import (
	"reflect"
	"slices"
	"sort"
	"strconv"
	"testing"
)

func TestExpandHostlist(t *testing.T) {
	for in, want := range map[string][]string{
		"gn1":                     {"gn1"},
		"gn[1-3]":                 {"gn1", "gn2", "gn3"},
		"gn[1-2],login01":         {"gn1", "gn2", "login01"},
		"n[08-10,3]":              {"n08", "n09", "n10", "n3"},
		"rack[1-2]-n[01-02]":      {"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"},
		"a[1],b[2-3]x,c":          {"a1", "b2x", "b3x", "c"},
		"node-[001-002],node-010": {"node-001", "node-002", "node-010"},
	} {
		got, err := ExpandHostlist(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %v %v, want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"gn[1-", "gn[2-1]", "gn]", "gn[a-b]"} {
		if _, err := ExpandHostlist(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	if i, _ := NodeIndex("gn[1-2]", "gn2"); i != 1 {
		t.Errorf("NodeIndex gn2 = %d", i)
	}
}

// TestCompressHostlist: node names as one Slurm hostlist, in natural order
// (gn2 before gn10), and ExpandHostlist gives the names back in that order.
func TestCompressHostlist(t *testing.T) {
	var gn []string
	for i := 16; i >= 1; i-- {
		gn = append(gn, "gn"+strconv.Itoa(i))
	}
	for _, c := range []struct {
		in   []string
		want string
	}{
		{gn, "gn[1-16]"},
		{[]string{"gn10", "gn2", "gn1", "gn2", "gn3", "gn20"}, "gn[1-3,10,20]"},
		{[]string{"n10", "n08", "n09", "n3"}, "n[3,08-10]"},
		{[]string{"gn9", "gn10", "login", "cpu-a"}, "cpu-a,gn[9-10],login"},
		{[]string{"rack1-n01", "rack1-n02", "rack2-n01"}, "rack1-n[01-02],rack2-n01"},
		{[]string{"n8", "n09"}, "n[8,09]"},
		{[]string{"solo7"}, "solo7"},
		{nil, ""},
	} {
		got := CompressHostlist(c.in)
		if got != c.want {
			t.Errorf("%v: %q, want %q", c.in, got, c.want)
			continue
		}
		if len(c.in) == 0 {
			continue
		}
		back, err := ExpandHostlist(got)
		want := append([]string(nil), c.in...)
		sort.SliceStable(want, func(i, j int) bool { return NaturalLess(want[i], want[j]) })
		want = slices.Compact(want)
		if err != nil || !reflect.DeepEqual(back, want) {
			t.Errorf("%q expands to %v %v, want %v", got, back, err, want)
		}
	}
	if !NaturalLess("gn2", "gn10") || NaturalLess("gn10", "gn2") || !NaturalLess("a", "b") || !NaturalLess("n8", "n08") {
		t.Error("NaturalLess")
	}
}
