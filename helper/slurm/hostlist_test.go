package slurm

import (
	"reflect"
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
