package slurm

import (
	"strings"
	"testing"
)

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

// TestParseAccounting reads sacct -n -P -X lines as Slurm 22.05 prints
// them: a cancel's "CANCELLED by <uid>", a time limit's signal, an array
// task's line among others, no line, and fields that do not parse.
func TestParseAccounting(t *testing.T) {
	cases := []struct {
		text  string
		want  Accounting
		known bool
		bad   bool
	}{
		{"5|COMPLETED|0:0|13\n", Accounting{ID: 5, State: "COMPLETED", ElapsedSeconds: 13}, true, false},
		{"5|CANCELLED by 2021|0:15|2\n", Accounting{ID: 5, State: "CANCELLED", Signal: 15, ElapsedSeconds: 2}, true, false},
		{"4|TIMEOUT|0:0|60\n5|FAILED|3:0|7\n", Accounting{ID: 5, State: "FAILED", ExitCode: 3, ElapsedSeconds: 7}, true, false},
		{"", Accounting{}, false, false},
		{"5|COMPLETED|0|13\n", Accounting{}, false, true},
		{"5|COMPLETED|0:0|1:02\n", Accounting{}, false, true},
		{"sacct: error: Problem talking to the database\n", Accounting{}, false, true},
	}
	for _, c := range cases {
		a, known, err := parseAccounting(c.text, 5)
		if (err != nil) != c.bad || known != c.known || a != c.want {
			t.Errorf("%q: got %+v %v %v", c.text, a, known, err)
		}
	}
}

// parseSubmit takes squeue's "<submit>|<start>" in unix seconds, and
// refuses an empty answer, a non-number, a start before the submit and
// N/A.
func TestParseSubmit(t *testing.T) {
	sub, st, err := parseSubmit("1700000000|1700000099\n")
	if err != nil || sub.Unix() != 1700000000 || st.Sub(sub).Seconds() != 99 {
		t.Errorf("got %v %v %v", sub, st, err)
	}
	for _, bad := range []string{"", "x|1", "5|4", "N/A|N/A"} {
		if _, _, err := parseSubmit(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// ReadConf reads keys as Slurm's parser does: any case, spaces around
// "=", several pairs on a line, quoted values, comments and "\#".
func TestParseConf(t *testing.T) {
	c, err := parseConf(strings.NewReader(`# a comment with PrologTimeout=9
PrologTimeout = 30
JobSubmitPlugins=lua  # the cap
NodeName=gn1 CPUs=2 State=UNKNOWN
plugstackconfig="/etc/slurm/plug stack.conf"
Epilog=/etc/slurm/ep\#ilog.sh
EpilogTimeout=20
EPILOGTIMEOUT=25
`))
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"PrologTimeout": "30", "jobsubmitplugins": "lua", "CPUs": "2", "State": "UNKNOWN",
		"PlugStackConfig": "/etc/slurm/plug stack.conf", "Epilog": "/etc/slurm/ep#ilog.sh", "EpilogTimeout": "25",
	} {
		if v, ok := c.Get(k); !ok || v != want {
			t.Errorf("%s: %q %v, want %q", k, v, ok, want)
		}
	}
	if _, ok := c.Get("comment"); ok {
		t.Error("a comment was read")
	}
}

// TestParseJobID: a job id is decimal and fits 32 bits; anything else is an
// error that names the text.
func TestParseJobID(t *testing.T) {
	if id, err := ParseJobID("4294967295"); err != nil || id != 4294967295 {
		t.Errorf("4294967295: %d %v", id, err)
	}
	for _, bad := range []string{"", "4294967296", "12_3", "-1", " 7"} {
		if _, err := ParseJobID(bad); err == nil || !strings.Contains(err.Error(), `job id "`+bad+`"`) {
			t.Errorf("%q: %v, want an error naming it", bad, err)
		}
	}
}
