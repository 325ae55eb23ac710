package callbacks

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
)

func TestParseArgs(t *testing.T) {
	a, err := ParseArgs([]string{"site=/etc/slurm/gym-otel.yaml", "default=on", "prolog_timeout=30",
		"cli=/opt/bin/gym-otel-spank", "record_dir=/run/x", "cgroup=required", "port_filter=require", "job_output=off", "host_power=rapl", "collector_wait=step", "on_failure=fail", "scrape_interval_seconds=5"})
	if err != nil {
		t.Fatal(err)
	}
	want := Args{Site: "/etc/slurm/gym-otel.yaml", DefaultOn: true, PrologTimeout: 30, CLI: "/opt/bin/gym-otel-spank",
		RecordDir: "/run/x", Cgroup: CgroupRequired, CgroupMemoryMaxMiB: DefaultCgroupMemoryMaxMiB, PortFilter: "require", HostPower: HostPowerRAPL, CollectorWait: WaitStep, SiteItems: []config.Item{{Key: "on_failure", Value: "fail"}, {Key: "scrape_interval_seconds", Value: "5"}}}
	if !reflect.DeepEqual(a, want) {
		t.Fatalf("got %+v\nwant %+v", a, want)
	}
	for _, v := range []string{HostPowerOff, HostPowerRAPL, HostPowerHwmon, HostPowerAuto} {
		if a, err := ParseArgs([]string{"host_power=" + v}); err != nil || a.HostPower != v {
			t.Errorf("host_power=%s: %q (%v)", v, a.HostPower, err)
		}
	}
	if a, err := ParseArgs(nil); err != nil || !a.JobOutput || a.HostPower != HostPowerOff || a.CollectorWait != WaitProlog {
		t.Errorf("no arguments: job_output %v, host_power %q, collector_wait %q (%v), want on, off and prolog by default", a.JobOutput, a.HostPower, a.CollectorWait, err)
	}
	for _, c := range []struct{ arg, want string }{
		{"bogus", `"bogus": expected key=value`},
		{"Site=/x", `"Site=/x": expected key=value`},
		{"site=rel/x", "absolute path"},
		{"default=maybe", "default wants on or off"},
		{"cgroup=yes", "cgroup wants auto, required or off"},
		{"host_power=on", "host_power wants off, rapl, hwmon or auto"},
		{"prolog_timeout=0", "prolog_timeout wants"},
		{"port_filter=on", `port_filter wants auto, require or off, not "on"`},
		{"cgroup_memory_max_mib=0", "cgroup_memory_max_mib wants whole MiB, 32..1048576"},
		{"cgroup_memory_max_mib=1e3", "cgroup_memory_max_mib wants whole MiB"},
		{"scrape_intervall=3", `"scrape_intervall=3": unknown argument`},
		{"prolog_timout=30", `"prolog_timout=30": unknown argument (did you mean "prolog_timeout"?)`},
		{"recorddir=/x", `(did you mean "record_dir"?)`},
		{"zzzzzzzzzzzz=1", "unknown argument (plugin arguments: site, default, prolog_timeout"},
		{"on_failure=explode", "otel.on_failure=explode"},
		{"job_output=no", `"job_output=no": job_output wants on or off`},
		{"job_output", `"job_output": expected key=value`},
		{"joboutput=off", `(did you mean "job_output"?)`},
		{"collector_wait=task", `"collector_wait=task": collector_wait wants prolog or step`},
		{"collector_wait=", `collector_wait wants prolog or step`},
	} {
		_, err := ParseArgs([]string{c.arg})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.arg, err, c.want)
		}
	}
}

func TestSubmit(t *testing.T) {
	dir := t.TempDir()
	site := filepath.Join(dir, "site.yaml")
	if err := os.WriteFile(site, []byte("otel:\n  endpoint: https://otlp.example.com\n  service_name: s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := func(m map[string]string) config.LookupEnv {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	a := Args{Site: site}
	res, err := Submit(a, "", dir, env(map[string]string{"OTEL_TOKEN": "t"}))
	if err != nil || res.Encoded == "" || res.TokenEnv != "OTEL_TOKEN" {
		t.Fatalf("%+v %v", res, err)
	}
	r, err := config.Decode(res.Encoded)
	if err != nil || r.JobDir != filepath.Join(dir, config.DefaultJobDirName) {
		t.Fatalf("decoded %+v %v", r, err)
	}
	if _, err := Submit(a, "", dir, env(nil)); err == nil || !strings.Contains(err.Error(), "otel.token_env") {
		t.Fatalf("no token: %v", err)
	}
	if res, err := Submit(a, "off", dir, env(nil)); err != nil || !res.Off {
		t.Fatalf("off: %+v %v", res, err)
	}
}

// The prolog asks slurmctld for array ids only when a name needs them.
func TestUsesArrayIDs(t *testing.T) {
	for _, c := range []struct {
		dir, run string
		want     bool
	}{
		{"/j/gym-otel-%j", "", false},
		{"/j/%A_%a", "", true},
		{"/j/x", "r%a", true},
		{"/j/100%%A", "r%%a", false},
		{"/j/%", "%", false},
	} {
		resolved := &config.Resolved{JobDir: c.dir}
		resolved.Identity.RunID = c.run
		if got := usesArrayIDs(resolved); got != c.want {
			t.Errorf("job_dir %q run_id %q: %v, want %v", c.dir, c.run, got, c.want)
		}
	}
}

// A record last written before the node's boot is over without asking
// Slurm; one written since is not, and neither is a dir without a record.
func TestBeforeBoot(t *testing.T) {
	boot := proc.BootTime()
	if boot.IsZero() {
		t.Fatal("no btime in /proc/stat")
	}
	dir := t.TempDir()
	if beforeBoot(dir, boot) {
		t.Error("a dir without a record counts as before the boot")
	}
	f := filepath.Join(dir, contract.RecordFile)
	if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if beforeBoot(dir, boot) {
		t.Error("a record written now counts as before the boot")
	}
	old := boot.Add(-time.Hour)
	if err := os.Chtimes(f, old, old); err != nil {
		t.Fatal(err)
	}
	if !beforeBoot(dir, boot) {
		t.Error("a record from an hour before the boot does not count as before it")
	}
	if beforeBoot(dir, time.Time{}) {
		t.Error("an unknown boot time makes records stale")
	}
}
