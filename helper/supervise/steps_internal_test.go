package supervise

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMarkSpawn: the supervisor's first step is "spawn" when the prolog's
// instant is plausible, and absent when it is missing, malformed, in the
// future or too old.
func TestMarkSpawn(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		env   string
		spawn bool
	}{
		{strconv.FormatInt(now.Add(-30*time.Millisecond).UnixMicro(), 10), true},
		{"", false},
		{"12x", false},
		{strconv.FormatInt(now.Add(time.Second).UnixMicro(), 10), false},
		{strconv.FormatInt(now.Add(-time.Minute).UnixMicro(), 10), false},
	} {
		t.Setenv(EnvSpawned, c.env)
		var st stepTimes
		st.markSpawn(now, time.Time{})
		st.mark("dir")
		got := st.String()
		if strings.HasPrefix(got, "spawn ") != c.spawn {
			t.Errorf("%s=%q: steps %q", EnvSpawned, c.env, got)
		}
		if c.spawn && !strings.HasPrefix(got, "spawn 3") {
			t.Errorf("%s=%q: steps %q, want spawn 30", EnvSpawned, c.env, got)
		}
	}
	t.Setenv(EnvSpawned, strconv.FormatInt(now.Add(-30*time.Millisecond).UnixMicro(), 10))
	var st stepTimes
	st.markSpawn(now, now.Add(-10*time.Millisecond))
	if got := st.String(); got != "spawn 20, options 10" {
		t.Errorf("with main's start: steps %q, want spawn 20, options 10", got)
	}
}
