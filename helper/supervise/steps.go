package supervise

import (
	"fmt"
	"strings"
	"time"
)

// stepTimes times the supervisor's start-up steps for its ready report
// (Readiness.Steps): each mark ends a step and names it with its duration
// in milliseconds; a step marked again (a new port choice) adds up.
type stepTimes struct {
	last  time.Time
	names []string
	ms    map[string]int64
}

// mark ends the step named name (its duration: since the previous mark).
func (t *stepTimes) mark(name string) {
	now := time.Now()
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
