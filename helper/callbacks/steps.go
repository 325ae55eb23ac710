package callbacks

import (
	"fmt"
	"strings"
	"time"
)

// stepClock times the prolog's steps for its "collector ready" log line:
// each mark ends a step and names it with its duration in milliseconds.
type stepClock struct {
	last  time.Time
	parts []string
}

func newStepClock(start time.Time) *stepClock { return &stepClock{last: start} }

// mark ends the step named name (its duration: since the previous mark).
func (c *stepClock) mark(name string) {
	now := time.Now()
	c.parts = append(c.parts, fmt.Sprintf("%s %d", name, now.Sub(c.last).Milliseconds()))
	c.last = now
}

// String is the steps as "name ms, name ms, ...".
func (c *stepClock) String() string { return strings.Join(c.parts, ", ") }
