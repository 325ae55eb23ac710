package launch_test

import (
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
)

// TestChoosePorts: root's choice is six distinct loopback ports, every
// field of the job's ports set, and EnvPorts' value reads back the same.
func TestChoosePorts(t *testing.T) {
	p, err := launch.ChoosePorts(nil)
	if err != nil {
		t.Fatal(err)
	}
	all := p.Loopback()
	if len(all) != 6 {
		t.Fatalf("ports %+v: want all six set", p)
	}
	seen := map[int]bool{}
	for _, n := range all {
		if seen[n] {
			t.Fatalf("ports %+v: %d twice", p, n)
		}
		seen[n] = true
	}
	back, err := launch.ParsePorts(launch.FormatPorts(p))
	if err != nil || back != p {
		t.Fatalf("ParsePorts(FormatPorts(%+v)) = %+v, %v", p, back, err)
	}
}

// TestParsePortsRefuses: a value that is not seven distinct ports in
// 1..65535 is refused, naming the variable and the value.
func TestParsePortsRefuses(t *testing.T) {
	for _, v := range []string{"", "1,2,3", "1,2,3,4,5,6,x", "1,2,3,4,5,6,6", "0,2,3,4,5,6,7", "1,2,3,4,5,6,65536", "1,2,3,4,5,6,7,8"} {
		_, err := launch.ParsePorts(v)
		if err == nil || !strings.Contains(err.Error(), launch.EnvPorts) || !strings.Contains(err.Error(), v) {
			t.Errorf("ParsePorts(%q) = %v: want an error naming %s and the value", v, err, launch.EnvPorts)
		}
	}
}

// TestMintToken: every token is new, "gos_" and 48 hex digits.
func TestMintToken(t *testing.T) {
	a, err := launch.MintToken()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := launch.MintToken()
	if a == b || !strings.HasPrefix(a, "gos_") || len(a) != 52 || strings.Trim(a[4:], "0123456789abcdef") != "" {
		t.Fatalf("tokens %q and %q: want two distinct gos_<48 hex digits>", a, b)
	}
}
