package callbacks

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus/hooks/test"
)

// TestSubmitFilterProblem: what a node can tell about the controller's cap
// from slurm.conf and a job_submit.lua beside it, and the warning once per
// node and problem.
func TestSubmitFilterProblem(t *testing.T) {
	capLua, err := os.ReadFile(filepath.Join("..", "..", "packaging", "job_submit", "gym-otel-cap.lua"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, conf, lua, want string
	}{
		{"no JobSubmitPlugins", "ClusterName=c\n", "", "has no JobSubmitPlugins"},
		{"another plugin", "JobSubmitPlugins=require_timelimit\n", "", "JobSubmitPlugins=require_timelimit (no lua)"},
		{"lua commented out", "#JobSubmitPlugins=lua\n", "", "has no JobSubmitPlugins"},
		{"lua, the shipped cap", "jobsubmitplugins=lua\n", string(capLua), ""},
		{"job_submit/lua among others, the cap", "JobSubmitPlugins=require_timelimit,job_submit/lua\n", string(capLua), ""},
		{"lua, another script", "JobSubmitPlugins=lua\n", "function slurm_job_submit() return slurm.SUCCESS end\n", "does not read spank_job_env"},
		{"lua, the script not visible here", "JobSubmitPlugins=lua\n", "", ""},
	} {
		dir := t.TempDir()
		conf := filepath.Join(dir, "slurm.conf")
		if err := os.WriteFile(conf, []byte(c.conf), 0o644); err != nil {
			t.Fatal(err)
		}
		if c.lua != "" {
			if err := os.WriteFile(filepath.Join(dir, SubmitFilterFile), []byte(c.lua), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got := submitFilterProblem(conf)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	if got := submitFilterProblem(""); got != "" {
		t.Errorf("no SLURM_CONF: %q", got)
	}
	// Once per node and problem.
	dir := t.TempDir()
	conf := filepath.Join(dir, "slurm.conf")
	os.WriteFile(conf, []byte("ClusterName=c\n"), 0o644)
	os.MkdirAll(filepath.Join(dir, "records", "n1"), 0o700)
	log, hook := test.NewNullLogger()
	for i := 0; i < 3; i++ {
		warnSubmitFilter(filepath.Join(dir, "records"), "n1", conf, log)
	}
	if n := len(hook.AllEntries()); n != 1 {
		t.Errorf("%d warnings for one problem, want 1", n)
	}
	os.WriteFile(conf, []byte("JobSubmitPlugins=cray\n"), 0o644)
	warnSubmitFilter(filepath.Join(dir, "records"), "n1", conf, log)
	if n := len(hook.AllEntries()); n != 2 {
		t.Errorf("%d warnings after the problem changed, want 2", n)
	}
}
