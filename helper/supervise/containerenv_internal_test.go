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
// configuration reads as ${env:...} (the receiver and plugin tokens, and
// with otel.delivery: collector the backend token) and GOMEMLIMIT must
// be in the runtime's environment under that prefix too, byte for byte,
// and no value of them on the runtime's command line. A template's
// {envname} argument (Podman's and Enroot's --env NAME, which copies NAME
// from the runtime's environment) is repeated once per name. With
// delivery from the files (the default) the backend token is in neither:
// the collector has no backend exporter.
func TestContainerRuntimeEnv(t *testing.T) {
	token := "b$e{a}r${env:HOME}$$-tok"
	for _, delivery := range []string{config.DeliveryCollector, config.DeliveryFiles} {
		t.Run(delivery, func(t *testing.T) {
			o := config.Defaults()
			o.Container, o.TokenEnv, o.Delivery = "/images/otelcol.sif", "SITE_TOKEN", delivery
			backend := delivery == config.DeliveryCollector
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
			names := []string{render.ReceiverTokenEnv, render.PluginTokenEnv, "GOMEMLIMIT"}
			if backend {
				names = append([]string{"SITE_TOKEN"}, names...)
			}
			for _, n := range names {
				if env[n] == "" {
					t.Errorf("the runtime's environment has no %s", n)
				}
				if got := env["APPTAINERENV_"+n]; got != env[n] {
					t.Errorf("APPTAINERENV_%s = %q, want %q (the value of %s): apptainer --cleanenv starts the collector without it", n, got, env[n], n)
				}
			}
			if backend && env["APPTAINERENV_SITE_TOKEN"] != render.Escape(token) {
				t.Errorf("APPTAINERENV_SITE_TOKEN %q, want the escaped token %q", env["APPTAINERENV_SITE_TOKEN"], render.Escape(token))
			}
			if !backend {
				for k, v := range env {
					if strings.Contains(k, "SITE_TOKEN") || strings.Contains(v, render.Escape(token)) || strings.Contains(v, token) {
						t.Errorf("with delivery %s the runtime's environment has the backend token: %s", delivery, k)
					}
				}
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
			want := []string{"podman", "run", "--rm", "--network=host"}
			if backend {
				want = append(want, "--env=SITE_TOKEN")
			}
			want = append(want, "--env="+render.ReceiverTokenEnv, "--env="+render.PluginTokenEnv, "--env=GOMEMLIMIT",
				"-v", "/jobs/9/otel:/jobs/9/otel", "/images/otelcol.sif", "/otelcol-gym", "--config", "/jobs/9/otel/collector.yaml")
			if lc.err != nil || !slices.Equal(lc.argv, want) {
				t.Errorf("argv %q (%v), want %q", lc.argv, lc.err, want)
			}

			// The host binary: the same environment, without the
			// runtime's prefixed copies.
			s.o.Container = ""
			lc = s.launchCmd()
			has := false
			for _, kv := range lc.env {
				if strings.HasPrefix(kv, "SITE_TOKEN=") {
					has = true
				}
			}
			if has != backend {
				t.Errorf("delivery %s: the host collector's environment has the backend token: %v, want %v", delivery, has, backend)
			}
		})
	}
}
