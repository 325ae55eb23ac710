package supervise

import (
	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
)

// NodeConfig is the collector.yaml the supervisor writes for spec and the
// job's facts f on this node, with the chosen loopback ports (ports.Final:
// the supervisor's final-figures port) and the output dir out ("" for
// jobfacts.OutputDir). Errors are render.Render's.
func NodeConfig(spec *config.Resolved, f jobfacts.Facts, ports render.Ports, out string) ([]byte, error) {
	if out == "" {
		out = jobfacts.OutputDir(spec, f)
	}
	return render.Render(render.Input{
		Resolved:  spec,
		Job:       render.JobOf(spec, f),
		Ports:     ports,
		OutputDir: out,
	})
}
