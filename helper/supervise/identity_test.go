package supervise_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
)

// TestIdentityStamped: the real collector stamps the run's identity on
// every resource as render's resource/identity says, with the types and
// the precedence the files' readers rely on. A producer's service.name
// becomes service.name.override (one it set itself is kept), the seed's
// keys are the job's whatever the producer sent (a forged slurm_job_id is
// overwritten), the job id stays a string and Lens' restart count an Int,
// and Lens' keys a producer set itself are kept (Lens' rule: derived values
// never overwrite inherited ones) while the missing ones are added.
func TestIdentityStamped(t *testing.T) {
	t.Parallel()
	s := harness.StartSup(t, harness.Job{JobID: "4321"}).MustReady(t)
	span := func(id string) string {
		return fmt.Sprintf(`"scopeSpans":[{"spans":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"%s","name":"identity-probe","kind":1,"startTimeUnixNano":"1","endTimeUnixNano":"2"}]}]`, id)
	}
	body := `{"resourceSpans":[` +
		// A Lens-instrumented producer: its own service name, a forged
		// seed key and its own Lens keys.
		`{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"nemo-gym/agent"}},` +
		`{"key":"slurm_job_id","value":{"stringValue":"forged"}},{"key":"user","value":{"stringValue":"mallory"}},` +
		`{"key":"slurm.job.id","value":{"stringValue":"producer-own"}},{"key":"nv.dl.job.uuid","value":{"stringValue":"producer-uuid"}}]},` +
		span("eee19b7ec3c1b174") + `},` +
		// A producer with a service.name.override of its own.
		`{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"svc"}},{"key":"service.name.override","value":{"stringValue":"kept"}}]},` +
		span("eee19b7ec3c1b175") + `},` +
		// A producer without a service name.
		`{"resource":{"attributes":[]},` + span("eee19b7ec3c1b176") + `}]}`
	postTraces(t, s, body)
	if _, err := s.Drain(t, 30*time.Second); err != nil {
		t.Fatalf("drain: %v\n%s", err, s.Output())
	}
	d := otlptest.MustRead(t, s.Out, "traces")
	var got []otlptest.Attrs
	for _, sp := range d.Spans {
		if sp.Name == "identity-probe" {
			got = append(got, sp.Resource)
		}
	}
	if len(got) != 3 {
		t.Fatalf("%d identity-probe spans in traces.jsonl, want 3", len(got))
	}
	str := func(r otlptest.Attrs, key, want string) {
		t.Helper()
		if v, ok := r.Str(key); !ok || v != want {
			t.Errorf("%s = %q (a string: %v), want the string %q; resource %v", key, v, ok, want, r.Text())
		}
	}
	for i, r := range got {
		str(r, "service.name", harness.ServiceName)
		str(r, "slurm_job_id", "4321")
		str(r, "run_id", "4321")
		str(r, "user", harness.CurrentUser())
		str(r, "host.name", s.Job.Node)
		isInt := false
		for _, kv := range r {
			if _, ok := kv.Value["intValue"]; ok && kv.Key == render.LensRestartCount {
				isInt = kv.Value.Text() == "0"
			}
		}
		if !isInt {
			t.Errorf("resource %d: %s is not the Int 0: %v", i, render.LensRestartCount, r.Text())
		}
		str(r, render.LensJobUser, harness.CurrentUser())
	}
	str(got[0], "service.name.override", "nemo-gym/agent")
	str(got[0], render.LensJobID, "producer-own")
	str(got[0], render.LensJobUUID, "producer-uuid")
	str(got[1], "service.name.override", "kept")
	str(got[1], render.LensJobID, "4321")
	if got[2].Has("service.name.override") {
		t.Errorf("a producer without a service name got service.name.override %v", got[2].Text())
	}
}

// postTraces sends body, an OTLP/JSON traces request, to the supervised
// collector's OTLP/HTTP receiver with the job's receiver token, and fails
// the test unless the collector answers 200.
func postTraces(t *testing.T, s *harness.Sup, body string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/v1/traces", s.Report.Ports.OTLPHTTP), strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.ReceiverToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("OTLP/HTTP export: %s", resp.Status)
	}
}
