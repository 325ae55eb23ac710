package jobfacts

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
)

func TestExpandJobDir(t *testing.T) {
	plain := Facts{JobID: "42"}
	array := Facts{JobID: "45", ArrayJobID: "40", ArrayTaskID: "5"}
	for _, c := range []struct {
		pattern string
		f       Facts
		want    string
	}{
		{"/runs/%j", plain, "/runs/42"},
		{"/runs/%A_%a", plain, "/runs/42_0"},
		{"/runs/%A_%a", array, "/runs/40_5"},
		{"/runs/%j-%%j-%x-%", array, "/runs/45-%j-%x-%"},
		{"", plain, ""},
	} {
		if got := ExpandJobDir(c.pattern, c.f); got != c.want {
			t.Errorf("%q: %q, want %q", c.pattern, got, c.want)
		}
	}
}

func TestOutputDir(t *testing.T) {
	resolved := &config.Resolved{JobDir: "/runs/%j"}
	first := Facts{JobID: "7", Node: "gn1", NodeIndex: 0}
	other := Facts{JobID: "7", Node: "gn2", NodeIndex: 1}
	if got := OutputDir(resolved, first); got != "/runs/7/otel" {
		t.Errorf("first node: %s", got)
	}
	if got := OutputDir(resolved, other); got != "/runs/7/otel/nodes/gn2" {
		t.Errorf("other node: %s", got)
	}
	// A link of a chain shares the first link's job dir and writes under links/<its id>.
	link := &config.Resolved{JobDir: "/runs/r1", ChainedFrom: "6"}
	if got := OutputDir(link, other); got != "/runs/r1/otel/links/7/nodes/gn2" {
		t.Errorf("link: %s", got)
	}
	// A node or job id with a slash cannot leave the job dir.
	if got := OutputDir(resolved, Facts{JobID: "7", Node: "x/../../etc", NodeIndex: 2}); got != "/runs/7/otel/nodes/etc" {
		t.Errorf("node with slashes: %s", got)
	}
}

func TestRunID(t *testing.T) {
	resolved := &config.Resolved{}
	f := Facts{JobID: "9", User: "u", Node: "gn1", Cluster: "c1", GPUs: []string{"0"}}
	if RunID(resolved, f) != "9" {
		t.Errorf("no run_id: %s", RunID(resolved, f))
	}
	resolved.Identity.RunID = "eval-%j"
	if RunID(resolved, f) != "eval-9" {
		t.Errorf("run_id eval-%%j: %s", RunID(resolved, f))
	}
}

func TestParseGPUs(t *testing.T) {
	for in, want := range map[string][]string{
		"":         nil,
		" ":        nil,
		"0,1,3":    {"0", "1", "3"},
		"0, 2 ,":   {"0", "2"},
		"0,gpu1,2": {"0", "2"},
		"(null)":   nil,
	} {
		if got := ParseGPUs(in); !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %v, want %v", in, got, want)
		}
	}
}

// TestParseGPUDevices: CUDA_VISIBLE_DEVICES as Slurm sets it in the
// prolog (render.JobOf passes it on: see its test).
func TestParseGPUDevices(t *testing.T) {
	long := strings.Repeat("a", 200)
	for in, want := range map[string][]string{
		"":   nil,
		" ,": nil,
		"MIG-0c1d2e3f-0000-4000-8000-000000000001, MIG-GPU-5fd4c1a0-0000-4000-8000-000000000000/1/0": {
			"MIG-0c1d2e3f-0000-4000-8000-000000000001", "MIG-GPU-5fd4c1a0-0000-4000-8000-000000000000/1/0"},
		"0,1": {"0", "1"},
		long:  {long[:128]},
	} {
		if got := ParseGPUDevices(in); !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %v, want %v", in, got, want)
		}
	}
}
