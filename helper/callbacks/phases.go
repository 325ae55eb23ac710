package callbacks

import (
	"strconv"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/sirupsen/logrus"
)

// prologStart is the prolog's start (unix ms) for the supervisor's phase
// spans: the C prolog's own stamp (launch.EnvPrologStart, taken before
// the Go core loads) when it is a plausible time, else now (logged: the
// span then misses the core's load).
func prologStart(getenv func(string) string, log logrus.FieldLogger) string {
	v := getenv(launch.EnvPrologStart)
	if t := launch.ParsePrologStart(v); !t.IsZero() && time.Since(t) >= 0 && time.Since(t) < time.Hour {
		return v
	}
	log.Debugf("%s=%q: the prolog's start is taken as now", launch.EnvPrologStart, v)
	return strconv.FormatInt(time.Now().UnixMilli(), 10)
}
