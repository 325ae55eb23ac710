package slurm

import "testing"

func TestParse(t *testing.T) {
	cases := []struct {
		text  string
		want  Job
		known bool
		bad   bool
	}{
		{"5|5|N/A|RUNNING\n", Job{ID: 5, State: "RUNNING"}, true, false},
		{"5|4|1|COMPLETED\n", Job{ID: 5, ArrayJobID: "4", ArrayTaskID: "1", State: "COMPLETED"}, true, false},
		// An array's first job id lists every task: only job 5's line counts.
		{"6|4|2|PENDING\n5|4|1|RUNNING\n", Job{ID: 5, ArrayJobID: "4", ArrayTaskID: "1", State: "RUNNING"}, true, false},
		{"", Job{}, false, false},
		{"5|4|1-3|PENDING\n", Job{}, false, true},
		{"garbage\n", Job{}, false, true},
	}
	for _, c := range cases {
		j, known, err := parse(c.text, 5)
		if (err != nil) != c.bad || known != c.known || j != c.want {
			t.Errorf("%q: got %+v %v %v", c.text, j, known, err)
		}
	}
	if !Final("COMPLETED") || !Final("NODE_FAIL") || Final("COMPLETING") || Final("RUNNING") || Final("REQUEUED") {
		t.Error("final states")
	}
}
