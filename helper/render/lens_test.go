package render

import (
	"reflect"
	"testing"
)

// TestLensUUID: the values are Python's str(uuid.uuid5(uuid.NAMESPACE_URL,
// name)), as Lens computes them.
func TestLensUUID(t *testing.T) {
	for name, want := range map[string]string{
		"nemo.lens.job/c1/1234":      "9a6e5010-16a8-54fc-8445-d1e1b1fffcd2",
		"nemo.lens.job/nocluster/77": "1a6da2ce-dead-5597-92b6-a33a1a4424ba",
		"nemo.lens.run/c1/1234/sr2":  "62a0d596-7045-5ba8-817f-0de4352797d6",
	} {
		if got := LensUUID(name); got != want {
			t.Errorf("LensUUID(%q) = %s, want %s", name, got, want)
		}
	}
}

// TestLensIdentity: Lens' derivation for a plain job, an array element and
// a job without cluster name or restart count.
func TestLensIdentity(t *testing.T) {
	flat := func(as []lensAttr) map[string]string {
		m := map[string]string{}
		for _, a := range as {
			m[a.key] = a.val
		}
		return m
	}
	got := flat(lensIdentity(Job{JobID: "1234", RestartCount: "2", SlurmCluster: "c1", User: "alice", SLUID: "s1", HeadNode: "gn1"}))
	want := map[string]string{
		LensHeadNode: "gn1", LensJobID: "1234", LensJobIDRaw: "1234", LensArrayJobID: "1234", LensArrayTaskID: "0",
		LensRestartCount: "2", LensSLUID: "s1", LensClusterName: "c1", LensJobUser: "alice",
		LensJobUUID: "9a6e5010-16a8-54fc-8445-d1e1b1fffcd2", LensRunUUID: "62a0d596-7045-5ba8-817f-0de4352797d6",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("plain job:\n got %v\nwant %v", got, want)
	}
	got = flat(lensIdentity(Job{JobID: "503", ArrayJobID: "500", ArrayTaskID: "3", SlurmCluster: "c1"}))
	if got[LensJobID] != "500_3" || got[LensJobIDRaw] != "503" || got[LensJobUUID] != "bb6a704f-d499-5e31-821d-d09093eb942c" || got[LensRunUUID] != "5a88aa2e-5925-527d-87a7-24c5ef2ccd98" {
		t.Errorf("array element: %v", got)
	}
	got = flat(lensIdentity(Job{JobID: "77"}))
	if got[LensJobUUID] != "1a6da2ce-dead-5597-92b6-a33a1a4424ba" || got[LensRestartCount] != "0" {
		t.Errorf("no cluster: %v", got)
	}
	if _, ok := got[LensClusterName]; ok {
		t.Errorf("an unknown cluster name is stamped: %v", got)
	}
	if _, ok := got[LensHeadNode]; ok {
		t.Errorf("an unknown head node is stamped: %v", got)
	}
	if lensIdentity(Job{}) != nil {
		t.Error("no job id, yet an identity")
	}
}
