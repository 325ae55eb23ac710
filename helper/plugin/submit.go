package plugin

import (
	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
)

// SubmitResult is what the submit context forwards.
type SubmitResult struct {
	// Off is true when the job opted out (--gym-otel=off, enabled=false):
	// nothing is forwarded.
	Off bool
	// Spec is the encoded resolved spec (the job-control variable GYM_OTEL_SPEC).
	Spec string
	// TokenEnv names the submitting shell's variable holding the token
	// (forwarded as GYM_OTEL_TOKEN, then unset in the client).
	TokenEnv string
	// Warnings are printed; the job is still submitted.
	Warnings []string
}

// Submit resolves and validates a job's settings in the submitting process
// (sbatch, salloc, srun outside a job) as the user: spec is the value of
// --gym-otel ("" for a bare flag), cwd the working directory and env the
// submitting environment. Errors name the key to fix, one per line.
func Submit(a Args, spec, cwd string, env config.LookupEnv) (SubmitResult, error) {
	var res SubmitResult
	r, err := config.Resolve(config.Inputs{SiteFile: a.Site, SiteItems: a.SiteItems, Spec: spec, WorkDir: cwd})
	if err != nil {
		return res, err
	}
	if !r.Otel.Enabled {
		res.Off = true
		return res, nil
	}
	warnings, err := r.Validate(env)
	res.Warnings = warnings
	if err != nil {
		return res, err
	}
	enc, err := r.Encode()
	if err != nil {
		return res, err
	}
	res.Spec = enc
	res.TokenEnv = r.Otel.TokenEnv
	return res, nil
}
