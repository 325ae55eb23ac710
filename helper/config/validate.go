package config

import (
	"errors"
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/gymschema"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
)

// LookupEnv looks a variable up in the submitting environment (os.LookupEnv
// in the CLI and the plugin's submit context).
type LookupEnv func(name string) (string, bool)

var identRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })

// Validate checks resolved settings before anything runs and normalises the
// endpoint (see NormalizeEndpoint). It returns warnings (the job still runs)
// and every error joined, one per line, each naming its key. env, when not
// nil, is the submitting environment: the variable named by otel.token_env
// must be set and non-empty there. On a node, pass nil and check the
// forwarded token instead.
func (r *Resolved) Validate(env LookupEnv) (warnings []string, err error) {
	o := &r.Otel
	if !o.Enabled {
		return nil, nil
	}
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	warnings = append(warnings, r.notes...)
	warnings = append(warnings, r.notices...)

	switch {
	case !o.RemoteExport():
		// Remote export off: nothing is sent, so neither the endpoint nor
		// the token is used or checked.
		note := "otel.delivery: none: remote export is off: the job's files are its only copy (gym-otel-spank replay DIR sends them later)"
		if o.Endpoint != "" {
			note += fmt.Sprintf("; otel.endpoint %s is not used", o.Endpoint)
		}
		warnings = append(warnings, note)
		o.Endpoint = ""
	case o.Endpoint == "":
		fail("otel.endpoint: not set: set the site's OTLP/HTTP ingest URL (or otel.delivery: none to keep the files only, or otel.enabled: false to opt out)")
	default:
		ep, warn, err := NormalizeEndpoint(o.Endpoint)
		if err != nil {
			fail("otel.endpoint: %q: %v", o.Endpoint, err)
		} else {
			o.Endpoint = ep
			if warn != "" {
				warnings = append(warnings, warn)
			}
			if strings.HasPrefix(ep, "http://") {
				warnings = append(warnings, fmt.Sprintf("otel.endpoint: %s is plain http: the bearer token from %s crosses the network unencrypted", ep, o.TokenEnv))
			}
		}
	}
	if strings.TrimSpace(o.ServiceName) == "" {
		fail("otel.service_name: not set: set the service.name the backend routes by")
	}
	switch {
	case !identRE().MatchString(o.TokenEnv):
		fail("otel.token_env: %q is not a variable name (letters, digits, _)", o.TokenEnv)
	case strings.HasPrefix(o.TokenEnv, "LD_"), strings.HasPrefix(o.TokenEnv, "SLURM_"),
		strings.HasPrefix(o.TokenEnv, "SPANK_"), strings.HasPrefix(o.TokenEnv, "GYM_OTEL_"):
		fail("otel.token_env: %q is reserved (LD_*, SLURM_*, SPANK_*, GYM_OTEL_*): name a variable of your own, such as OTEL_TOKEN", o.TokenEnv)
	case env != nil && o.RemoteExport():
		if v, ok := env(o.TokenEnv); !ok || v == "" {
			fail("otel.token_env: the variable %s (named by otel.token_env) is not set or empty in the submitting environment: export %s=<bearer token> before submitting", o.TokenEnv, o.TokenEnv)
		} else if err := CheckToken(o.TokenEnv, v); err != nil {
			errs = append(errs, err)
		}
	}
	if !filepath.IsAbs(o.Binary) {
		fail("otel.binary: %q is not an absolute path", o.Binary)
	}
	if o.Container != "" && !strings.Contains(o.ContainerRuntime, "{image}") {
		fail("otel.container_runtime: %q has no {image} placeholder for otel.container", o.ContainerRuntime)
	}
	if o.Container != "" {
		if err := CheckEnrootImage(o.ContainerRuntime, o.Container); err != nil {
			errs = append(errs, err)
		}
	}
	if strings.TrimSpace(o.Component) == "" {
		fail("otel.component: empty: set the display name of the scraped engine metrics (default gym-vllm)")
	}
	if o.GymTelemetry && r.noGymInstall {
		fail("otel.gym_telemetry: true needs driver.gym_install in %s (the telemetry extra is installed with that checkout): set driver.gym_install, or otel.gym_telemetry: false to keep the collector for engine and node metrics only", r.GymConfig)
	}
	for i, a := range r.Services {
		for _, b := range r.Services[i+1:] {
			if n, ok := gymschema.SharedNode(a.Nodes, b.Nodes); a.Port == b.Port && ok {
				fail("%s and %s: both %d on %s: give one of them another port, or pin them to different node pools (services.<name>.node_pool)", a.PortKey(), b.PortKey(), a.Port, n)
			}
		}
		for _, p := range []struct {
			key  string
			port int
		}{{"gpu_metrics_port", o.GPUMetricsPort}, {"node_metrics_port", o.NodeMetricsPort}} {
			if p.port != 0 && p.port == a.Port {
				fail("%s: %d is also otel.%s: give the service another port, or set otel.%s to the exporter's real port", a.PortKey(), a.Port, p.key, p.key)
			}
		}
	}
	if !filepath.IsAbs(r.JobDir) {
		fail("job_dir: %q is not an absolute path", r.JobDir)
	}
	errs = append(errs, r.checkBounds()...)
	errs = append(errs, r.checkValues()...)
	if err := o.checkShutdown(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, o.checkScrapeLimits()...)
	errs = append(errs, o.checkDelivery()...)
	return warnings, errors.Join(errs...)
}

// NormalizeEndpoint checks an OTLP/HTTP base URL and returns it without
// trailing slashes. The otlp_http exporter appends /v1/<signal> itself, so a
// URL that already ends in /v1/metrics, /v1/traces or /v1/logs is cut back to
// its base (and a warning says so) rather than getting a doubled path. A path
// prefix such as /api/otlp is kept. Errors: not http(s), no host, a query or
// fragment.
func NormalizeEndpoint(raw string) (endpoint, warning string, err error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return "", "", fmt.Errorf("not a URL: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", "", fmt.Errorf("expected an http:// or https:// URL")
	}
	if u.Hostname() == "" {
		return "", "", fmt.Errorf("the URL has no host")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", "", fmt.Errorf("the URL must not have a query or fragment")
	}
	if u.User != nil {
		return "", "", fmt.Errorf("credentials do not belong in the URL: put the token in otel.token_env's variable")
	}
	p := strings.TrimRight(u.Path, "/")
	for _, sig := range []string{"/v1/metrics", "/v1/traces", "/v1/logs"} {
		if strings.HasSuffix(p, sig) {
			base := strings.TrimSuffix(p, sig)
			warning = fmt.Sprintf("otel.endpoint: %q ends in %s; the exporter appends /v1/<signal> itself, so %s://%s%s is used", raw, sig, u.Scheme, u.Host, base)
			p = base
			break
		}
	}
	u.Path = p
	u.RawPath = ""
	return u.String(), warning, nil
}
