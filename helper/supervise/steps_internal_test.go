package supervise

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
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
		t.Setenv(launch.EnvSpawned, c.env)
		var st stepTimes
		st.markSpawn(now, time.Time{})
		st.mark("dir")
		got := st.String()
		if strings.HasPrefix(got, "spawn ") != c.spawn {
			t.Errorf("%s=%q: steps %q", launch.EnvSpawned, c.env, got)
		}
		if c.spawn && !strings.HasPrefix(got, "spawn 3") {
			t.Errorf("%s=%q: steps %q, want spawn 30", launch.EnvSpawned, c.env, got)
		}
	}
	t.Setenv(launch.EnvSpawned, strconv.FormatInt(now.Add(-30*time.Millisecond).UnixMicro(), 10))
	var st stepTimes
	st.markSpawn(now, now.Add(-10*time.Millisecond))
	if got := st.String(); got != "spawn 20, options 10" {
		t.Errorf("with main's start: steps %q, want spawn 20, options 10", got)
	}
}
