package callbacks

import (
	"context"
	"fmt"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/gym-otel-spank/gym-otel-spank/helper/portfilter"
	"github.com/gym-otel-spank/gym-otel-spank/helper/record"
)

// The epilog removes a job's chains by the names its prolog gave them: of
// the record's cluster, or, for a job whose prolog ran before the chains
// held the cluster's name (its record has no filter_cluster line), by the
// legacy names; never another cluster's chains of the same job id and node.
func TestReleasePortsNames(t *testing.T) {
	var removed []portfilter.Job
	old := removeRules
	removeRules = func(_ context.Context, j portfilter.Job) error {
		removed = append(removed, j)
		return nil
	}
	t.Cleanup(func() { removeRules = old })
	log := logrus.New()

	mine := portfilter.Job{ID: 7, Cluster: "c1", Node: "gn1"}
	theirs := portfilter.Job{ID: 7, Cluster: "c2", Node: "gn1"}
	legacy := portfilter.Job{ID: 7, Node: "gn1", Legacy: true}

	for _, c := range []struct {
		name string
		text string
		want portfilter.Job
	}{
		{"this prolog's record", "status=ready\nfilter_ports=40001,40002\nfilter_cluster=c1\n", mine},
		{"a record from before the upgrade", "status=ready\nfilter_ports=40001,40002\n", legacy},
	} {
		removed = nil
		rec, err := record.Parse([]byte(c.text))
		if err != nil {
			t.Fatal(err)
		}
		releasePorts(context.Background(), rec, "gn1", 7, log)
		if len(removed) != 1 {
			t.Fatalf("%s: %d removals, want 1", c.name, len(removed))
		}
		got := removed[0]
		for _, h := range []string{"in", "out"} {
			if got.Chain(h) != c.want.Chain(h) {
				t.Errorf("%s: the epilog removes %s, want %s", c.name, got.Chain(h), c.want.Chain(h))
			}
		}
		for _, other := range []portfilter.Job{mine, theirs, legacy} {
			if other.Chain("in") != c.want.Chain("in") && got.Chain("in") == other.Chain("in") {
				t.Errorf("%s: the epilog touches %s", c.name, other.Chain("in"))
			}
		}
		if fmt.Sprint(got.Ports) != "[40001 40002]" {
			t.Errorf("%s: the epilog removes ports %v, want [40001 40002]", c.name, got.Ports)
		}
	}
}
