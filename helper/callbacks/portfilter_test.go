package callbacks

import (
	"context"
	"strings"
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
	var scripts []string
	old := nftRunner
	nftRunner = func() portfilter.Runner {
		return func(_ context.Context, script string) error {
			scripts = append(scripts, script)
			return nil
		}
	}
	t.Cleanup(func() { nftRunner = old })
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
		scripts = nil
		rec, err := record.Parse([]byte(c.text))
		if err != nil {
			t.Fatal(err)
		}
		releasePorts(context.Background(), rec, "gn1", 7, log)
		all := strings.Join(scripts, "")
		for _, h := range []string{"in", "out"} {
			if !strings.Contains(all, "delete chain inet gym_otel "+c.want.Chain(h)+"\n") {
				t.Errorf("%s: the epilog does not delete %s:\n%s", c.name, c.want.Chain(h), all)
			}
		}
		for _, other := range []portfilter.Job{mine, theirs, legacy} {
			if other.Chain("in") != c.want.Chain("in") && strings.Contains(all, other.Chain("in")) {
				t.Errorf("%s: the epilog touches %s:\n%s", c.name, other.Chain("in"), all)
			}
		}
		for _, p := range []string{"40001", "40002"} {
			if !strings.Contains(all, "delete element inet gym_otel in_ports { "+p+" }") {
				t.Errorf("%s: port %s left in the map:\n%s", c.name, p, all)
			}
		}
	}
}
