package config

import (
	"encoding/json"
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/gymschema"
	"path/filepath"
	"strconv"
)

// servicePortKey checks a decoded service port (Resolved.Services).
var servicePortKey = keyDef{name: "port", kind: kindPort, min: 1, max: 65535}

// checkValues re-checks every value of the settings against what the otel:
// block's keys allow when a user writes them (ranges, enums, modes) and
// what Resolve ever makes (service ports and node indexes, the chain's
// job id, the Gym config's path). Settings made by Resolve always pass; a
// node runs it (through Validate) on the settings it is handed, which anyone
// can set by hand through libslurm, so that a forged value, such as a
// memory_limit_mib of 0 or one that overflows the cgroup's bound, is
// refused by name instead of meaning "no bound". One error per value,
// each naming the key, the value and what is allowed.
func (r *Resolved) checkValues() []error {
	var errs []error
	fields := otelFields(r.Otel)
	for i := range keyDefs {
		k := &keyDefs[i]
		raw := fields[k.name]
		switch k.kind {
		case kindInt, kindPort:
			var n int
			if err := json.Unmarshal(raw, &n); err != nil {
				errs = append(errs, fmt.Errorf("otel.%s: %s is not an integer", k.name, raw))
				continue
			}
			if k.kind == kindPort && k.nullable && n == 0 {
				continue // skipped
			}
			if _, err := k.checkInt(strconv.Itoa(n)); err != nil {
				errs = append(errs, fmt.Errorf("otel.%s: %w", k.name, err))
			}
		case kindPatterns:
			var ps []string
			if err := json.Unmarshal(raw, &ps); err != nil {
				errs = append(errs, fmt.Errorf("otel.%s: %s is not a list of strings", k.name, raw))
				continue
			}
			if ps == nil {
				continue // null: every series
			}
			if _, err := checkPatterns(ps); err != nil {
				errs = append(errs, fmt.Errorf("otel.%s: %w", k.name, err))
			}
		case kindEnum, kindMode:
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				errs = append(errs, fmt.Errorf("otel.%s: %s is not a string", k.name, raw))
				continue
			}
			v, err := k.checkString(s)
			if err == nil && v.s != s {
				err = fmt.Errorf("%q is not in the form %q", s, v.s)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("otel.%s: %w", k.name, err))
			}
		}
	}
	for _, s := range r.Services {
		if s.Name == "" {
			errs = append(errs, fmt.Errorf("services: a service without a name"))
		}
		if _, err := servicePortKey.checkInt(strconv.Itoa(s.Port)); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.PortKey(), err))
		}
		switch {
		case s.Role == gymschema.RoleRay && s.Type == gymschema.TypeRay, s.Role == gymschema.RoleRouter && s.Type == gymschema.TypeVLLMPD:
		case s.Role != "":
			errs = append(errs, fmt.Errorf("services.%s: role %q with type %q is not an endpoint this plugin scrapes (router of vllm_pd, ray)", s.Name, s.Role, s.Type))
		case s.Type != gymschema.TypeVLLM && s.Type != gymschema.TypeVLLMPD:
			errs = append(errs, fmt.Errorf("services.%s.type: %q is not a type whose /metrics is scraped (vllm, vllm_pd)", s.Name, s.Type))
		}
		for _, n := range s.Nodes {
			if n < 0 {
				errs = append(errs, fmt.Errorf("services.%s: node index %d is negative (0 is the job's first node)", s.Name, n))
			}
		}
	}
	if r.ChainedFrom != "" {
		if n, err := strconv.ParseUint(r.ChainedFrom, 10, 32); err != nil || n == 0 {
			errs = append(errs, fmt.Errorf("chained_from: %q is not a Slurm job id", r.ChainedFrom))
		}
	}
	if r.GymConfig != "" && !filepath.IsAbs(r.GymConfig) {
		errs = append(errs, fmt.Errorf("config: %q is not an absolute path", r.GymConfig))
	}
	return errs
}
