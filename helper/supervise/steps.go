package supervise

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
)

// markSpawn starts t at the supervisor's start (now), with the step
// "spawn" first when launch.EnvSpawned gives a plausible instant before it, from
// then to main (the supervisor's main, when not zero) and "options" from
// main to now, else from then to now.
func (t *stepTimes) markSpawn(now, main time.Time) {
	t.last = now
	us, err := strconv.ParseInt(os.Getenv(launch.EnvSpawned), 10, 64)
	if err != nil {
		return
	}
	spawned := time.UnixMicro(us)
	if d := now.Sub(spawned); d < 0 || d >= 10*time.Second {
		return
	}
	t.last = spawned
	if main.After(spawned) && !main.After(now) {
		t.markAt("spawn", main)
		t.markAt("options", now)
		return
	}
	t.markAt("spawn", now)
}

// stepTimes times the supervisor's start-up steps for its ready report
// (launch.Readiness.Steps): each mark ends a step and names it with its duration
// in milliseconds; a step marked again (a new port choice) adds up.
type stepTimes struct {
	last  time.Time
	names []string
	ms    map[string]int64
}

// mark ends the step named name (its duration: since the previous mark).
func (t *stepTimes) mark(name string) { t.markAt(name, time.Now()) }

// markAt ends the step named name at now.
func (t *stepTimes) markAt(name string, now time.Time) {
	if t.ms == nil {
		t.ms = map[string]int64{}
	}
	if _, ok := t.ms[name]; !ok {
		t.names = append(t.names, name)
	}
	t.ms[name] += now.Sub(t.last).Milliseconds()
	t.last = now
}

// String is the steps as "name ms, name ms, ...".
func (t *stepTimes) String() string {
	parts := make([]string, len(t.names))
	for i, n := range t.names {
		parts[i] = fmt.Sprintf("%s %d", n, t.ms[n])
	}
	return strings.Join(parts, ", ")
}
