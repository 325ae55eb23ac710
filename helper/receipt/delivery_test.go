package receipt

import (
	"strings"
	"testing"
	"time"
)

// The delivery section: written and read back, refused when its counts
// disagree, and summarised as complete, caught up late (with the lag) or
// incomplete (what replay sends).
func TestDeliverySummary(t *testing.T) {
	from := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	base := func() *Receipt {
		return &Receipt{JobID: "12", Node: "gn1", Basis: BasisFinal, Collectors: 1, Signals: map[string]Counts{"traces": {Received: 10, Written: 10}}}
	}
	r := base()
	r.Delivery = &Delivery{Items: 10, Accepted: 10, Requests: 3}
	dir := t.TempDir()
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	got, err := Read(dir)
	if err != nil || got.Delivery == nil || got.Delivery.Accepted != 10 {
		t.Fatalf("read back: %v %+v", err, got)
	}
	s := strings.Join(got.Summary(), "\n")
	if !strings.Contains(s, "backend copy COMPLETE") || strings.Contains(s, "sent to the backend 0") {
		t.Errorf("complete:\n%s", s)
	}

	r = base()
	r.Delivery = &Delivery{Items: 150010, Accepted: 150010, Requests: 40, Retries: 9, DuplicatesBound: 200,
		CatchUps: []CatchUp{{From: from, Answered: from.Add(30 * time.Second), CaughtUp: from.Add(37 * time.Second), Items: 150000}}}
	s = strings.Join(r.Summary(), "\n")
	for _, want := range []string{"caught up late", "150000 items reached it up to 37s late", "at most 200 duplicates", "backend copy COMPLETE"} {
		if !strings.Contains(s, want) {
			t.Errorf("caught up late: no %q in\n%s", want, s)
		}
	}

	r = base()
	r.Delivery = &Delivery{Backlog: 75000, BacklogLines: 400, Error: "the drain's bound ran out before the backend answered for every line",
		CatchUps: []CatchUp{{From: from}}}
	s = strings.Join(r.Summary(), "\n")
	for _, want := range []string{"INCOMPLETE: 75000 items (400 lines)", "replay DIR` sends exactly those", "had not answered again"} {
		if !strings.Contains(s, want) {
			t.Errorf("incomplete: no %q in\n%s", want, s)
		}
	}

	r = base()
	r.Delivery = &Delivery{Items: 10, Accepted: 9}
	if err := r.Write(t.TempDir()); err == nil || !strings.Contains(err.Error(), "accepted 9 + rejected 0 is not items 10") {
		t.Errorf("inconsistent counts: %v", err)
	}
}
