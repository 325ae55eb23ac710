package inspect

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
)

// TestTokenHintFromCollectorLog: the recorded real job of
// testdata/slurmrun/traceparent as if its backend had refused every
// export: the receipt counts the failures, collector.log has the
// exporter's error as the collector logs it. A 401 adds, right after the
// LOST lines of the outcome, what to check: the job's token, by the
// variable the submit read it from (collector.yaml's backend header,
// OTEL_TOKEN); a 403 its rights; a 503 nothing. Before, the report said
// only LOST.
func TestTokenHintFromCollectorLog(t *testing.T) {
	for _, c := range []struct {
		status, want string
	}{
		{"401", "gn1: the backend answered HTTP 401 (collector.log): it did not accept the job's bearer token, which the submit read from $OTEL_TOKEN (otel.token_env)"},
		{"403", "gn1: the backend answered HTTP 403 (collector.log): it accepted no data from the job's bearer token, which the submit read from $OTEL_TOKEN (otel.token_env)"},
		{"503", ""},
	} {
		_, otel := slurmRun(t, "traceparent")
		rc, err := receipt.Read(otel)
		if err != nil {
			t.Fatal(err)
		}
		for sig, s := range rc.Signals {
			s.SendFailed, s.Sent = s.Sent, 0
			rc.Signals[sig] = s
		}
		if err := rc.Write(otel); err != nil {
			t.Fatal(err)
		}
		line := "2026-12-03T13:55:15.100Z\terror\tinternal/base_exporter.go:153\tExporting failed. Rejecting data.\t" +
			`{"kind": "exporter", "data_type": "traces", "name": "otlp_http/backend", "error": "not retryable error: Permanent error: ` +
			`rpc error: code = Unauthenticated desc = error exporting items, request to http://127.0.0.1:4318/v1/traces responded with HTTP Status Code ` +
			c.status + `, Message=bad token, Details=[]", "rejected_items": 22}` + "\n"
		if err := os.WriteFile(filepath.Join(otel, "collector.log"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := Build(filepath.Dir(otel))
		if err != nil {
			t.Fatal(err)
		}
		all := strings.Join(r.Trouble, "\n")
		if c.want == "" {
			if strings.Contains(all, "answered HTTP") {
				t.Errorf("%s: a token hint:\n%s", c.status, all)
			}
			continue
		}
		if !strings.Contains(all, c.want) || !strings.Contains(r.Trouble[0], "LOST:") {
			t.Errorf("%s: trouble lacks %q after the LOST lines:\n%s", c.status, c.want, all)
		}
		var b strings.Builder
		if err := r.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		head := strings.Join(strings.SplitN(b.String(), "\n", 26)[:25], "\n")
		if !strings.Contains(head, "answered HTTP "+c.status) || !strings.Contains(head, "$OTEL_TOKEN") {
			t.Errorf("%s: the first 25 lines lack the hint:\n%s", c.status, head)
		}
	}
}
