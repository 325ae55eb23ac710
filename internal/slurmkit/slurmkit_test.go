package slurmkit

import (
	"strings"
	"testing"
)

// TestJobID: sbatch's two forms of a job id, and output that names none
// (an error, a number inside other text) gives none.
func TestJobID(t *testing.T) {
	for out, want := range map[string]string{
		"Submitted batch job 42\n":                       "42",
		"warning: x\nSubmitted batch job 7 on cluster c": "7",
		"123\n":         "123",
		"123;gymtest\n": "123",
		"":              "",
		"sbatch: error: Batch job submission failed\n": "",
		"job 12 failed": "",
	} {
		got, ok := JobID(out)
		if got != want || ok != (want != "") {
			t.Errorf("JobID(%q) = %q, %v; want %q", out, got, ok, want)
		}
	}
}

// TestLocal: root's commands get Local.Env on top of this process's
// environment; a cluster's all-idle states name every node.
func TestLocal(t *testing.T) {
	out, err := Local{Env: []string{"GOS_KIT_PROBE=x1"}}.On("gn1", "sh", "-c", "echo $GOS_KIT_PROBE; echo err >&2; exit 3")
	if err == nil || out != "x1\nerr\n" {
		t.Errorf("On: %q, %v; want x1, err and exit status 3", out, err)
	}
	c := Cluster{Nodes: []string{"c1", "c2"}}
	if got := c.AllIdle(); got != "c1=idle c2=idle" {
		t.Errorf("AllIdle: %q", got)
	}
	if got := PlugstackLine("/opt/p", "/run/r"); !strings.HasPrefix(got, "required /opt/p/gym_otel.so site=/opt/p/site.yaml cli=/opt/p/gym-otel-spank record_dir=/run/r ") {
		t.Errorf("PlugstackLine: %q", got)
	}
}
