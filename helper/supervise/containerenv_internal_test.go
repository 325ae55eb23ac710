package supervise

import (
	"slices"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
)

// TestContainerRuntimeEnv: the default otel.container_runtime is
// `apptainer exec --cleanenv ...`, which starts the collector with none of
// the runtime's environment but what Apptainer's documented
// APPTAINERENV_<NAME> passes in as <NAME>. Every variable the collector's
// configuration reads as ${env:...} (the three tokens) and GOMEMLIMIT must
// be in the runtime's environment under that prefix too, byte for byte,
// and no value of them on the runtime's command line. A template's
// {envname} argument (Podman's and Enroot's --env NAME, which copies NAME
// from the runtime's environment) is repeated once per name.
func TestContainerRuntimeEnv(t *testing.T) {
	o := config.Defaults()
	o.Container, o.TokenEnv = "/images/otelcol.sif", "SITE_TOKEN"
	token := "b$e{a}r${env:HOME}$$-tok"
	s := &supervisor{o: o, opt: Options{Token: token}, rtoken: "r0123456789abcdef", ptoken: "p0123456789abcdef", out: "/jobs/9/otel", logPath: "/jobs/9/otel/collector.log"}
	lc := s.launchCmd()
	if lc.err != nil {
		t.Fatal(lc.err)
	}
	env := map[string]string{}
	for _, kv := range lc.env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for _, n := range []string{"SITE_TOKEN", render.ReceiverTokenEnv, render.PluginTokenEnv, "GOMEMLIMIT"} {
		if env[n] == "" {
			t.Errorf("the runtime's environment has no %s", n)
		}
		if got := env["APPTAINERENV_"+n]; got != env[n] {
			t.Errorf("APPTAINERENV_%s = %q, want %q (the value of %s): apptainer --cleanenv starts the collector without it", n, got, env[n], n)
		}
	}
	if env["APPTAINERENV_SITE_TOKEN"] != render.Escape(token) {
		t.Errorf("APPTAINERENV_SITE_TOKEN %q, want the escaped token %q", env["APPTAINERENV_SITE_TOKEN"], render.Escape(token))
	}
	for _, a := range lc.argv {
		for _, secret := range []string{token, render.Escape(token), s.rtoken, s.ptoken} {
			if strings.Contains(a, secret) {
				t.Errorf("a token on the runtime's command line: %q", a)
			}
		}
	}
	if !slices.Equal(lc.argv[:4], []string{"apptainer", "exec", "--cleanenv", "--no-eval"}) || !slices.Contains(lc.argv, "/jobs/9/otel/collector.yaml") {
		t.Errorf("argv %q", lc.argv)
	}

	s.o.ContainerRuntime = "podman run --rm --network=host --env={envname} -v {output}:{output} {image} /otelcol-gym --config {config}"
	lc = s.launchCmd()
	want := []string{"podman", "run", "--rm", "--network=host",
		"--env=SITE_TOKEN", "--env=" + render.ReceiverTokenEnv, "--env=" + render.PluginTokenEnv, "--env=GOMEMLIMIT",
		"-v", "/jobs/9/otel:/jobs/9/otel", "/images/otelcol.sif", "/otelcol-gym", "--config", "/jobs/9/otel/collector.yaml"}
	if lc.err != nil || !slices.Equal(lc.argv, want) {
		t.Errorf("argv %q (%v), want %q", lc.argv, lc.err, want)
	}
}
