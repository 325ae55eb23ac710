package supervise

import (
	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
)

// NodeConfig is the collector.yaml the supervisor writes for resolved and the
// job's facts f on this node, with the chosen loopback ports (ports.Final:
// the supervisor's final-figures port) and the output dir out ("" for
// jobfacts.OutputDir). Errors are render.Render's.
func NodeConfig(resolved *config.Resolved, f jobfacts.Facts, ports render.Ports, out string) ([]byte, error) {
	if out == "" {
		out = jobfacts.OutputDir(resolved, f)
	}
	return render.Render(render.Input{
		Resolved:  resolved,
		Job:       render.JobOf(resolved, f),
		Ports:     ports,
		OutputDir: out,
	})
}
