package config

import (
	"github.com/gym-otel-spank/gym-otel-spank/helper/gymschema"
	"strings"
	"testing"
)

func validSpec() *Resolved {
	r := &Resolved{Version: EncodedVersion, Otel: Defaults(), JobDir: "/jobs/x"}
	r.Otel.Endpoint, r.Otel.ServiceName = "https://otlp.example.com", "svc"
	return r
}

func TestBoundsNameTheKeyAndTheLimit(t *testing.T) {
	env := func(v string) LookupEnv {
		return func(string) (string, bool) { return v, true }
	}
	cases := []struct {
		name  string
		edit  func(r *Resolved)
		token string
		want  []string
	}{
		{"long service_name", func(r *Resolved) { r.Otel.ServiceName = strings.Repeat("s", 140*1024) }, "t",
			[]string{"otel.service_name", "143360 bytes, more than the 1024 allowed"}},
		{"newline in run_id", func(r *Resolved) { r.Identity.RunID = "r1\nstatus=ready" }, "t",
			[]string{`run_id "r1\nstatus=ready"`, `control character '\n' at byte 2`}},
		{"newline in gym_span_groups", func(r *Resolved) { r.Otel.GymSpanGroups = "default\r\n" }, "t",
			[]string{"otel.gym_span_groups", "control character"}},
		{"long token", func(*Resolved) {}, strings.Repeat("k", 20000),
			[]string{"otel.token_env: the token in OTEL_TOKEN is 20000 bytes, more than the 16384 allowed"}},
		{"a thousand services", func(r *Resolved) {
			for i := 0; i < 1000; i++ {
				r.Services = append(r.Services, gymschema.Service{Name: "s" + strings.Repeat("x", i%50), Type: "vllm", Port: 1000 + i})
			}
		}, "t", []string{"services: 1000 model services, more than the 64"}},
		{"long job_dir", func(r *Resolved) { r.JobDir = "/" + strings.Repeat("d", 5000) }, "t",
			[]string{"job_dir", "more than the 4096 allowed"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := validSpec()
			c.edit(r)
			_, err := r.Validate(env(c.token))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "kkkkkkkk") {
				t.Error("the error quotes the token")
			}
		})
	}
	if _, err := validSpec().Validate(env("t")); err != nil {
		t.Fatalf("a plain spec: %v", err)
	}
}

func TestEncodedSpecBound(t *testing.T) {
	r := validSpec()
	for i := 0; i < MaxServices; i++ {
		r.Services = append(r.Services, gymschema.Service{Name: strings.Repeat("n", 600) + string(rune('a'+i%26)), Model: strings.Repeat("m", 1000), Type: "vllm", Port: 2000 + i})
	}
	errs := r.checkBounds()
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "more than the 32768 allowed") {
		t.Fatalf("errs %v", errs)
	}
}
