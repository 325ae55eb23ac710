package inspect

import (
	"strings"
	"testing"
)

func TestDir(t *testing.T) {
	s, err := Dir("testdata/otel")
	if err != nil {
		t.Fatal(err)
	}
	if s.Spans != 9 || s.LogRecords != 3 || s.Lines["traces"] != 2 || s.BadLines["traces"] != 1 {
		t.Errorf("counts: %+v", s)
	}
	if s.Producers["nemo-gym/agent"] == 0 || strings.Join(s.Identity["slurm_job_id"], ",") != "77" {
		t.Errorf("producers %v identity %v", s.Producers, s.Identity)
	}
	var b strings.Builder
	s.Write(&b)
	for _, want := range []string{"9 spans", "(1 did not parse)", "traces.span.metrics.calls"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
	if _, err := Dir(t.TempDir()); err == nil {
		t.Error("an empty dir summarised")
	}
}
