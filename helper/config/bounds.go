package config

import (
	"fmt"
	"strings"
	"unicode"
)

// Size bounds checked at submit. Every forwarded setting reaches the nodes
// inside one job-control variable, which slurmd passes to `slurmstepd spank
// prolog` as an environment string; Linux refuses to exec a program whose
// single environment string exceeds 128 KiB (MAX_ARG_STRLEN), and a prolog
// that cannot start drains the node. The bounds keep every job far below.
const (
	// MaxEncodedBytes bounds the encoded settings (GYM_OTEL_SPEC), bytes.
	MaxEncodedBytes = 32 * 1024
	// MaxTokenBytes bounds the backend token (GYM_OTEL_TOKEN), bytes.
	MaxTokenBytes = 16 * 1024
	// MaxNameBytes bounds names and labels: service_name, component,
	// token_env, gym_span_groups, run_id, benchmark, model, cluster, and
	// each service's name, model and served model name.
	MaxNameBytes = 1024
	// MaxPathBytes bounds paths and URLs: endpoint, binary, container,
	// container_runtime, job_dir.
	MaxPathBytes = 4096
	// MaxServices bounds the number of model services scraped.
	MaxServices = 64
)

// boundedText is one string the settings carry, with its key and bound.
type boundedText struct {
	key, value string
	max        int
}

func (r *Resolved) texts() []boundedText {
	o := &r.Otel
	t := []boundedText{
		{"otel.endpoint", o.Endpoint, MaxPathBytes},
		{"otel.service_name", o.ServiceName, MaxNameBytes},
		{"otel.token_env", o.TokenEnv, MaxNameBytes},
		{"otel.binary", o.Binary, MaxPathBytes},
		{"otel.container", o.Container, MaxPathBytes},
		{"otel.container_runtime", o.ContainerRuntime, MaxPathBytes},
		{"otel.component", o.Component, MaxNameBytes},
		{"otel.gym_span_groups", o.GymSpanGroups, MaxNameBytes},
		{"run_id", r.Identity.RunID, MaxNameBytes},
		{"benchmark", r.Identity.Benchmark, MaxNameBytes},
		{"model", r.Identity.Model, MaxNameBytes},
		{"cluster", r.Identity.Cluster, MaxNameBytes},
		{"job_dir", r.JobDir, MaxPathBytes},
	}
	for _, s := range r.Services {
		p := "services." + s.Name
		t = append(t, boundedText{p, s.Name, MaxNameBytes},
			boundedText{p + ".model", s.Model, MaxNameBytes},
			boundedText{p + ".served_model_name", s.ServedModelName, MaxNameBytes})
	}
	return t
}

// checkBounds returns an error per string over its bound or holding a
// control character (a newline would break the line formats of root's
// record and of the logs), per list over its bound, and for the encoded
// settings over MaxEncodedBytes. Each names the key and the bound.
func (r *Resolved) checkBounds() []error {
	var errs []error
	for _, t := range r.texts() {
		if len(t.value) > t.max {
			errs = append(errs, fmt.Errorf("%s: %d bytes, more than the %d allowed", shortKey(t.key, t.value), len(t.value), t.max))
		}
		if i := strings.IndexFunc(t.value, func(c rune) bool { return unicode.IsControl(c) && c != '\t' }); i >= 0 {
			errs = append(errs, fmt.Errorf("%s: holds the control character %q at byte %d: use a single line of printable text", shortKey(t.key, t.value), t.value[i], i))
		}
	}
	if len(r.Services) > MaxServices {
		errs = append(errs, fmt.Errorf("services: %d model services, more than the %d a job's collector scrapes", len(r.Services), MaxServices))
	}
	if len(errs) == 0 {
		if enc, err := r.Encode(); err == nil && len(enc) > MaxEncodedBytes {
			errs = append(errs, fmt.Errorf("the job's settings encode to %d bytes (GYM_OTEL_SPEC), more than the %d allowed: shorten the longest values (services, names, paths)", len(enc), MaxEncodedBytes))
		}
	}
	return errs
}

// shortKey names key for a message, without quoting a long value.
func shortKey(key, value string) string {
	if len(value) <= 64 {
		return fmt.Sprintf("%s %q", key, value)
	}
	return fmt.Sprintf("%s %q...", key, value[:32])
}

// CheckToken checks the backend token's size (never quoting it). tokenEnv
// names the variable it came from, for the message.
func CheckToken(tokenEnv, token string) error {
	if len(token) > MaxTokenBytes {
		return fmt.Errorf("otel.token_env: the token in %s is %d bytes, more than the %d allowed (it travels to every node in one job-control variable)", tokenEnv, len(token), MaxTokenBytes)
	}
	return nil
}
