package callbacks

import (
	"fmt"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
)

// SubmitResult is what the submit context forwards.
type SubmitResult struct {
	// Off is true when the job opted out (--gym-otel=off, enabled=false):
	// nothing is forwarded.
	Off bool
	// Encoded is the resolved settings, encoded (config.Resolved.Encode),
	// as the job-control variable GYM_OTEL_SPEC carries them.
	Encoded string
	// TokenEnv names the submitting shell's variable holding the token
	// (forwarded as GYM_OTEL_TOKEN, then unset in the client).
	TokenEnv string
	// Token is the token of the parent job's collector for a nested
	// submit whose environment has none ("" otherwise: the token is the
	// TokenEnv variable's value). The caller sets it as TokenEnv in the
	// client's environment, where the C front forwards and unsets it.
	Token string
	// Warnings are printed; the job is still submitted.
	Warnings []string
}

// Submit resolves and validates a job's settings in the submitting process
// (sbatch, salloc, srun outside a job) as the user: spec is the value of
// --gym-otel ("" for a bare flag), cwd the working directory and env the
// submitting environment. Errors name the key to fix, one per line.
//
// A submit nested in a running --gym-otel job (an sbatch from its batch
// script, as Gym's auto-resume chain does; see parentJob) is the next link
// of a chain: it shares the job dir and run_id, writes its files apart
// (config.Resolved.ChainedFrom), and, when its environment holds no token
// (the job's steps removed it), takes the token from the running job's
// collector on this node (parentToken).
func Submit(a Args, spec, cwd string, env config.LookupEnv) (SubmitResult, error) {
	var res SubmitResult
	in := config.Inputs{SiteFile: a.Site, SiteItems: a.SiteItems, Spec: spec, WorkDir: cwd}
	r, err := config.Resolve(in)
	if err != nil {
		// Every problem at once: what did resolve is validated too (the
		// token only outside a chain, whose token may come from its job).
		venv := env
		if parentJob(env) != "" {
			venv = nil
		}
		res.Warnings, err = config.AlsoValidate(r, in, err, venv)
		return res, err
	}
	if !r.Otel.Enabled {
		res.Off = true
		return res, nil
	}
	if parent := parentJob(env); parent != "" {
		r.ChainedFrom = parent
		if v, ok := env(r.Otel.TokenEnv); r.Otel.RemoteExport() && (!ok || v == "") {
			tok, terr := parentToken(r, parent, env)
			if terr != nil {
				return res, fmt.Errorf("otel.token_env: %s is not set in this nested submit, and the token of the running job could not be taken over: %v: export %s=<bearer token> before this sbatch", r.Otel.TokenEnv, terr, r.Otel.TokenEnv)
			}
			res.Token = tok
			inner := env
			env = func(k string) (string, bool) {
				if k == r.Otel.TokenEnv {
					return tok, true
				}
				return inner(k)
			}
		}
	}
	warnings, err := r.ValidateWhere(in, env)
	res.Warnings = warnings
	if err != nil {
		return res, err
	}
	enc, err := r.Encode()
	if err != nil {
		return res, err
	}
	res.Encoded = enc
	if r.Otel.RemoteExport() {
		res.TokenEnv = r.Otel.TokenEnv
	}
	return res, nil
}
