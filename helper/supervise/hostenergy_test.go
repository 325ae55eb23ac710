package supervise_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
)

// TestHostEnergyScraped: a supervisor handed a RAPL zone's energy_uj as
// the plugin's prolog hands it (a read-only descriptor after the hold
// socket, named in its environment with its range) serves the zone's
// energy, and the collector scrapes it into metrics.jsonl at the scrape
// interval. Once it runs, the zone's path names another file (the
// supervisor reading the path would see its 5 µJ): its sums follow the
// handed file alone, written through the test's own descriptor, across
// the counter's wrap, to the 3 J written.
func TestHostEnergyScraped(t *testing.T) {
	tree := t.TempDir()
	path := filepath.Join(tree, "energy_uj")
	const maxUJ = 2000000 // 2 J: the counter wraps within the test
	if err := os.WriteFile(path, []byte("1500000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ro, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	dir := harness.SharedDir(t)
	rec := filepath.Join(dir, "record")
	if err := os.WriteFile(rec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := harness.StartSup(t, harness.Job{JobID: "8383", Record: rec, Scrape: 1,
		HostEnergy: []launch.EnergyZone{{Name: "package-0", File: ro, MaxUJ: maxUJ}}})
	ro.Close() // root's copy: the supervisor's serves on
	s.MustReady(t)
	if err := os.Rename(path, path+".handed"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	harness.WaitMetricNames(t, s, 15*time.Second, vocab.HostEnergyJoules)
	// 1.5 J -> 1.9 J -> (wrap at 2 J) 0.4 J -> 1.6 J: 0.4 + 0.5 + 1.2 = 2.1 J;
	// then 1.6 J -> 0.5 J (wrap) = 0.9 J more: 3 J.
	for _, uj := range []int{1900000, 400000, 1600000, 500000} {
		if err := w.Truncate(0); err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteAt([]byte(fmt.Sprintf("%d\n", uj)), 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2500 * time.Millisecond) // more than two scrapes
	}
	if _, err := s.Drain(t, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	d, err := otlptest.Read(filepath.Join(s.Out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var last, wraps float64
	points := 0
	for _, m := range d.Metrics {
		if m.Sum == nil || (m.Name != vocab.HostEnergyJoules && m.Name != vocab.HostEnergyWraps) {
			continue
		}
		for _, p := range m.Sum.DataPoints {
			if z, _ := p.Attributes.Str("zone"); z != "package-0" {
				t.Errorf("%s point of zone %q", m.Name, z)
			}
			if m.Name == vocab.HostEnergyWraps {
				wraps = p.Value()
				continue
			}
			if p.Value() < last {
				t.Errorf("the sum went down: %v after %v", p.Value(), last)
			}
			last = p.Value()
			points++
		}
	}
	if points < 8 || last < 2.999999 || last > 3.000001 || wraps != 2 {
		t.Errorf("%d points, last %v J, %v wraps: want 8 or more scrapes, 3 J, 2 wraps", points, last, wraps)
	}
}
