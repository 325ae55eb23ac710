package callbacks

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestArgsSameInC: the C front (spank/args.c) and the Go core (ParseArgs)
// read the arguments C uses (default, record_dir, core, job_output,
// collector_wait; prolog_timeout C only reads, keeping the default for a
// value Go refuses) alike: the
// same values after path cleaning, and the same arguments refused.
func TestArgsSameInC(t *testing.T) {
	bin := testenv.BuildCDriver(t, t.TempDir(), "args", "args.c", `#include <stdio.h>
#include "args.h"
int main(int argc, char **argv) {
	struct gos_args a = {0};
	if (gos_args_parse(&a, argc - 1, argv + 1)) {
		printf("error=%s\n", a.err);
		gos_args_free(&a);
		return 0;
	}
	printf("default=%d record_dir=%s core=%s job_output=%d wait_step=%d prolog_timeout=%d\n", a.default_on, a.record_dir, a.core ? a.core : "", a.job_output, a.wait_step, a.prolog_timeout);
	gos_args_free(&a);
	return 0;
}
`)
	for _, c := range []struct {
		args []string
		want string // the C driver's line: values, or "error" when both refuse
	}{
		{nil, "default=0 record_dir=/run/gym-otel core= job_output=1 wait_step=0 prolog_timeout=60"},
		{[]string{"default=on", "on_failure=fail"}, "default=1 record_dir=/run/gym-otel core= job_output=1 wait_step=0 prolog_timeout=60"},
		{[]string{"", "default=off"}, "default=0 record_dir=/run/gym-otel core= job_output=1 wait_step=0 prolog_timeout=60"},
		{[]string{"record_dir=/run//x/./y/../z/"}, "default=0 record_dir=/run/x/z core= job_output=1 wait_step=0 prolog_timeout=60"},
		{[]string{"core=/opt/a/../b.so"}, "default=0 record_dir=/run/gym-otel core=/opt/b.so job_output=1 wait_step=0 prolog_timeout=60"},
		{[]string{"record_dir=/.."}, "default=0 record_dir=/ core= job_output=1 wait_step=0 prolog_timeout=60"},
		{[]string{"record_dir=/a/b/../../../c"}, "default=0 record_dir=/c core= job_output=1 wait_step=0 prolog_timeout=60"},
		{[]string{"record_dir=///"}, "default=0 record_dir=/ core= job_output=1 wait_step=0 prolog_timeout=60"},
		{[]string{"record_dir=/a/..b/.c"}, "default=0 record_dir=/a/..b/.c core= job_output=1 wait_step=0 prolog_timeout=60"},
		{[]string{"job_output=off"}, "default=0 record_dir=/run/gym-otel core= job_output=0 wait_step=0 prolog_timeout=60"},
		{[]string{"job_output=on", "default=on"}, "default=1 record_dir=/run/gym-otel core= job_output=1 wait_step=0 prolog_timeout=60"},
		{[]string{"collector_wait=step"}, "default=0 record_dir=/run/gym-otel core= job_output=1 wait_step=1 prolog_timeout=60"},
		{[]string{"collector_wait=prolog", "prolog_timeout=12"}, "default=0 record_dir=/run/gym-otel core= job_output=1 wait_step=0 prolog_timeout=12"},
		{[]string{"collector_wait=tasks"}, "error"},
		{[]string{"collector_wait=step", "collector_wait=step"}, "error"},
		{[]string{"job_output=no"}, "error"},
		{[]string{"job_output="}, "error"},
		{[]string{"job_output=off", "job_output=off"}, "error"},
		{[]string{"default=maybe"}, "error"},
		{[]string{"record_dir=run"}, "error"},
		{[]string{"core=lib.so job_output=1"}, "error"},
		{[]string{"record_dir=/a", "record_dir=/b"}, "error"},
		{[]string{"default=on", "default=on"}, "error"},
		{[]string{"Default=on"}, "error"},
		{[]string{"novalue"}, "error"},
	} {
		out, err := exec.Command(bin, c.args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", c.args, err, out)
		}
		line := strings.TrimSpace(string(out))
		a, gerr := ParseArgs(c.args)
		gline := "default=0"
		if a.DefaultOn {
			gline = "default=1"
		}
		gline += " record_dir=" + a.RecordDir + " core=" + a.Core + " job_output=0"
		if a.JobOutput {
			gline = strings.TrimSuffix(gline, "0") + "1"
		}
		gline += " wait_step=0"
		if a.CollectorWait == WaitStep {
			gline = strings.TrimSuffix(gline, "0") + "1"
		}
		gline += fmt.Sprintf(" prolog_timeout=%d", a.PrologTimeout)
		if c.want == "error" {
			if !strings.HasPrefix(line, "error=") || gerr == nil {
				t.Errorf("%q: C %q, Go %v: both must refuse", c.args, line, gerr)
			} else if !strings.Contains(line, c.args[len(c.args)-1]) {
				t.Errorf("%q: C's error does not name the argument: %q", c.args, line)
			}
			continue
		}
		if line != c.want || gerr != nil || gline != c.want {
			t.Errorf("%q:\n  C  %q\n  Go %q (%v)\n  want %q", c.args, line, gline, gerr, c.want)
		}
	}
}
