package timing

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

func TestForDefaults(t *testing.T) {
	p := For(config.Defaults(), Bounds{})
	want := Policy{
		FinalWait: 16 * time.Second, HealthWait: 300 * time.Second, ReportWait: 305 * time.Second,
		SpanMetricsFlush: 2 * time.Second, SpanMetricsSettle: 5 * time.Second,
		CollectorStop: 20 * time.Second, DrainWait: 30 * time.Second,
	}
	if d := config.Defaults(); d.ScrapeIntervalSeconds != 15 || d.HealthCheckTimeoutSeconds != 300 || d.ShutdownTimeoutSeconds != 20 {
		t.Fatalf("the defaults changed (%d, %d, %d): update this test's figures", d.ScrapeIntervalSeconds, d.HealthCheckTimeoutSeconds, d.ShutdownTimeoutSeconds)
	}
	if p != want {
		t.Fatalf("got  %+v\nwant %+v", p, want)
	}
}

func TestForNodeBounds(t *testing.T) {
	o := config.Defaults()
	o.ScrapeIntervalSeconds = 300
	// prolog_timeout 60 s under Slurm's PrologEpilogTimeout=20: both
	// deadlines are 15 s and the drain gets 15 - 5 - 1 = 9 s.
	p := For(o, Bounds{PrologTimeout: 60 * time.Second, SlurmProlog: 20 * time.Second, SlurmEpilog: 20 * time.Second})
	if p.FinalWait != contract.MaxFinalWait || p.EpilogDeadline != 15*time.Second || p.DrainWait != 9*time.Second {
		t.Fatalf("%+v", p)
	}
	if d := Deadline(60*time.Second, 20*time.Second); d != 15*time.Second {
		t.Fatalf("the prolog's deadline is %s, want 15s", d)
	}
	// No Slurm bound: the plugstack's; a tiny one still leaves a second.
	p = For(o, Bounds{PrologTimeout: 60 * time.Second})
	if p.EpilogDeadline != 60*time.Second || p.DrainWait != 30*time.Second {
		t.Fatalf("%+v", p)
	}
	p = For(o, Bounds{PrologTimeout: 60 * time.Second, SlurmEpilog: 3 * time.Second})
	if p.EpilogDeadline != time.Second || p.DrainWait != time.Second {
		t.Fatalf("%+v", p)
	}
}

// TestAdminGuideFormulas: the admin guide's timing formulas are the ones
// this package computes; a change to a constant that leaves the guide
// behind fails here.
func TestAdminGuideFormulas(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(testenv.Root(), "docs", "admin-guide.md"))
	if err != nil {
		t.Fatal(err)
	}
	guide := strings.Join(strings.Fields(string(data)), " ")
	s := func(d time.Duration) int { return Seconds(d) }
	drainExtra := s(For(config.Defaults(), Bounds{}).SpanMetricsSettle + SupervisorSlack)
	for _, want := range []string{
		fmt.Sprintf("prolog deadline = min(prolog_timeout, PrologTimeout - %d s)", s(SlurmMargin)),
		fmt.Sprintf("epilog deadline = min(prolog_timeout, EpilogTimeout - %d s)", s(SlurmMargin)),
		fmt.Sprintf("stops at `deadline - %d s` (each Slurm query at most %d s)", s(KillReserve+QueryBound), s(QueryBound)),
		fmt.Sprintf("skipped with a warning when less than %d s are left", s(KillReserve+QueryBound)),
		fmt.Sprintf("`min(health_check_timeout_seconds + %d, time left - %d s)`", s(ReportSlack), s(KillReserve)),
		fmt.Sprintf("| killing a failed start, writing the record | the last %d s |", s(KillReserve)),
		fmt.Sprintf("`min(shutdown_timeout_seconds + %d, time left - %d s)`", drainExtra, s(GroupKillBound+RemoveReserve)),
		fmt.Sprintf("| killing what is left in the job's cgroup | `min(%d s, time left - %d s)`", s(GroupKillBound), s(RemoveReserve)),
		fmt.Sprintf("| removing the group on every hierarchy (up to seven) | `min(%d s, time left)`", s(RemoveReserve)),
		fmt.Sprintf("| the sweep of orphaned cgroups of earlier jobs | `min(%d s, time left)`", s(EpilogSweepBound)),
		fmt.Sprintf("the batch step's final-scrape wait is at most %d s", s(contract.MaxFinalWait)),
		fmt.Sprintf("the drain exceeded `shutdown_timeout_seconds + %d`", drainExtra),
		fmt.Sprintf("(`shutdown_timeout_seconds` + %d s) below `EpilogTimeout`", drainExtra),
		fmt.Sprintf("flushes span metrics every %d s", s(SpanMetricsFlush)),
	} {
		if !strings.Contains(guide, want) {
			t.Errorf("docs/admin-guide.md does not say %q", want)
		}
	}
}
