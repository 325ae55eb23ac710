package launch

import (
	"os"
	"testing"
	"time"
)

// SlurmdAnchor accepts only a process named slurmd.
func TestSlurmdAnchorNotSlurmd(t *testing.T) {
	if _, err := SlurmdAnchor(os.Getpid()); err == nil {
		t.Error("the test process was taken for a slurmd")
	}
}

// ParseJobEnd takes Unix seconds; empty, 0, negative or not a number is
// no time.
func TestParseJobEnd(t *testing.T) {
	if got := ParseJobEnd("1764590400"); !got.Equal(time.Unix(1764590400, 0)) {
		t.Errorf("got %v", got)
	}
	for _, v := range []string{"", "0", "-5", "soon"} {
		if !ParseJobEnd(v).IsZero() {
			t.Errorf("%q gave a time", v)
		}
	}
}
