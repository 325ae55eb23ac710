package inspect

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
)

// TestSpanCountsAgree: the recorded real job of testdata/slurmrun/
// traceparent, whose supervisor appended 2 phase spans and 34 span metric
// points after the collector's exit and delivered them: every span count
// the report gives agrees or says why it differs. The backend's count is
// the collector's 22 spans and the supervisor's 2 (24, said apart), the
// files' 24 (the health line), the spans section the job's 13 with the 11
// phase spans named as the rest of the files' 24. Before, the report read
// "accepted all 22 spans", "spans (13)" and "24 spans" without a word.
func TestSpanCountsAgree(t *testing.T) {
	r, otel := slurmRun(t, "traceparent")
	inFiles := 0
	for _, d := range r.Health.Dirs {
		inFiles += d.Spans
	}
	rc, err := receipt.Read(otel)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Signals["traces"].Sent != 22 || rc.AppendedSpans() != 2 || rc.AppendedPoints() != 34 || inFiles != 24 {
		t.Fatalf("recording: collector sent %d spans, %d appended (%d points), files %d spans: want 22, 2 (34), 24",
			rc.Signals["traces"].Sent, rc.AppendedSpans(), rc.AppendedPoints(), inFiles)
	}
	s := r.Spans
	if s.Total != 13 || s.PhaseSpans != 11 || s.InFiles != inFiles {
		t.Errorf("spans: total %d, phase spans %d, in files %d: want 13, 11, %d", s.Total, s.PhaseSpans, s.InFiles, inFiles)
	}
	want := "nothing lost: the backend accepted all 24 spans, 46 metric points, 5 log records (final receipts of 1 node; " +
		"the supervisor delivered 2 spans and 34 metric points of them, appended after the collector's exit)"
	if r.Summary.Delivery != want || r.Summary.DeliveryState != "ok" {
		t.Errorf("delivery %q (%s), want %q", r.Summary.Delivery, r.Summary.DeliveryState, want)
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, w := range []string{
		"== spans (13 of the job's)\n  the files hold 24 spans: these 13 and the 11 Slurm phase spans (the plugin's, under Slurm phases)\n",
		"1 node gn1: final figures, nothing failed (sent to the backend: 24 spans, 46 metric points, 5 log\n  records; 2 spans and 34 metric points of them by the supervisor after the collector's exit)\n",
		"24 spans, 5 logs",
	} {
		if !strings.Contains(text, w) {
			t.Errorf("text lacks %q:\n%s", w, text)
		}
	}
}

// TestAppendedNotDeliveredIsLost: the same job with its appended lines
// not delivered (the backend answered 503 to the supervisor): what
// reached the backend is NOT everything, the lines are named with the
// replay command, and the receipt is not folded into "nothing failed".
// Before, the outcome read "nothing lost" and the receipt folded.
func TestAppendedNotDeliveredIsLost(t *testing.T) {
	_, otel := slurmRun(t, "traceparent")
	rc, err := receipt.Read(otel)
	if err != nil {
		t.Fatal(err)
	}
	for i := range rc.Appended {
		rc.Appended[i].Delivered, rc.Appended[i].HTTPStatus, rc.Appended[i].Cause = false, 503, "the backend answered 503"
	}
	if err := rc.Write(otel); err != nil {
		t.Fatal(err)
	}
	r, err := Build(filepath.Dir(otel))
	if err != nil {
		t.Fatal(err)
	}
	if r.Summary.DeliveryState != "lost" || !strings.Contains(r.Summary.Delivery, "NOT everything") ||
		!strings.Contains(r.Summary.Delivery, "2 phase spans") || !strings.Contains(r.Summary.Delivery, "NOT delivered to the backend (the backend answered 503)") {
		t.Errorf("delivery %q (%s): want the undelivered appended lines", r.Summary.Delivery, r.Summary.DeliveryState)
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	head := strings.Join(strings.SplitN(text, "\n", 16)[:15], "\n")
	if !strings.Contains(head, "NOT everything reached it") || !strings.Contains(head, "replay --appended") {
		t.Errorf("the outcome does not say the appended lines are not at the backend:\n%s", head)
	}
	if strings.Contains(textSections(text, "receipts"), "nothing failed") {
		t.Errorf("the receipt folded as nothing failed:\n%s", textSections(text, "receipts"))
	}
	// A backend down loses the collector's items too: those and the
	// replay come first, the appended lines after them.
	for sig, c := range rc.Signals {
		c.SendFailed, c.Sent = c.Sent, 0
		rc.Signals[sig] = c
	}
	if err := rc.Write(otel); err != nil {
		t.Fatal(err)
	}
	if r, err = Build(filepath.Dir(otel)); err != nil {
		t.Fatal(err)
	}
	replay, appended := -1, -1
	for i, l := range r.Trouble {
		if strings.Contains(l, "`gym-otel-spank replay DIR`") && replay < 0 {
			replay = i
		}
		if strings.Contains(l, "NOT delivered") && appended < 0 {
			appended = i
		}
	}
	if !strings.Contains(r.Trouble[0], "LOST: the backend did not get") || replay < 0 || appended < replay {
		t.Errorf("trouble order: want the LOST lines, the replay, then the appended lines:\n%s", strings.Join(r.Trouble, "\n"))
	}
}
