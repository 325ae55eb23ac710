package callbacks

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestTelemetryNoticeInC: the batch step's lines in the job's output
// (spank/notice.c gos_notice_task_telemetry, compiled with stand-ins for
// Slurm's spank_get_item and spank_getenv): task 0 only; one node or a
// hostlist; an array element named as Slurm names it; the inspect
// argument one shell word whatever the dir's name (bash reads it back as
// the dir); nothing when the dir or the backend is not one line.
func TestTelemetryNoticeInC(t *testing.T) {
	bin := testenv.BuildCDriver(t, t.TempDir(), "notice", "notice.c", `#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "notice.h"
static const char *env_nodes, *env_aj, *env_at;
static unsigned rank;
spank_err_t spank_get_item(spank_t sp, spank_item_t item, ...)
{
	va_list ap;
	(void)sp;
	va_start(ap, item);
	if (item == S_TASK_GLOBAL_ID)
		*va_arg(ap, uint32_t *) = rank;
	va_end(ap);
	return item == S_TASK_GLOBAL_ID ? ESPANK_SUCCESS : ESPANK_BAD_ARG;
}
spank_err_t spank_getenv(spank_t sp, const char *var, char *buf, int len)
{
	const char *v = !strcmp(var, "SLURM_JOB_NODELIST") ? env_nodes :
			!strcmp(var, "SLURM_ARRAY_JOB_ID") ? env_aj :
			!strcmp(var, "SLURM_ARRAY_TASK_ID") ? env_at : NULL;
	(void)sp;
	if (!v || !*v)
		return ESPANK_ENV_NOEXIST;
	snprintf(buf, len, "%s", v);
	return ESPANK_SUCCESS;
}
void slurm_error(const char *fmt, ...) { (void)fmt; }
void slurm_info(const char *fmt, ...) { (void)fmt; }
/* notice <rank> <nodes> <array job> <array task> <dir> <backend> */
int main(int argc, char **argv)
{
	if (argc != 7)
		return 2;
	rank = (unsigned)atoi(argv[1]);
	env_nodes = argv[2];
	env_aj = argv[3];
	env_at = argv[4];
	gos_notice_task_telemetry(NULL, 1234, argv[5], argv[6]);
	return 0;
}
`)
	run := func(args ...string) string {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", args, err, out)
		}
		return string(out)
	}
	const be = "https://otlp.example.com:4318"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"0", "gn[1-2]", "", "", "/runs/r1/otel", be},
			"gym-otel: job 1234's telemetry: files under /runs/r1/otel (nodes gn[1-2]), shipped to https://otlp.example.com:4318\n" +
				"gym-otel: read it: gym-otel-spank inspect /runs/r1/otel (complete once the job has ended)\n"},
		{[]string{"0", "gn7", "1230", "4", "/runs/r1/otel", be},
			"gym-otel: job 1234 (1230_4)'s telemetry: files under /runs/r1/otel (node gn7), shipped to https://otlp.example.com:4318\n" +
				"gym-otel: read it: gym-otel-spank inspect /runs/r1/otel (complete once the job has ended)\n"},
		{[]string{"0", "", "", "", "/runs/r1/otel", ""},
			"gym-otel: job 1234's telemetry: files under /runs/r1/otel, not shipped (no backend)\n" +
				"gym-otel: read it: gym-otel-spank inspect /runs/r1/otel (complete once the job has ended)\n"},
		{[]string{"1", "gn[1-2]", "", "", "/runs/r1/otel", be}, ""},
		{[]string{"0", "gn1", "", "", "", be}, ""},
		{[]string{"0", "gn1", "", "", "/runs/a\nb/otel", be}, ""},
		{[]string{"0", "gn1", "", "", "/runs/a\x1b[2Jb/otel", be}, ""},
		{[]string{"0", "gn1", "", "", "/runs/r1/otel", be + "/x\ny"}, ""},
	} {
		if got := run(c.args...); got != c.want {
			t.Errorf("%q:\n got %q\nwant %q", c.args, got, c.want)
		}
	}
	// A dir a shell would split or expand is one quoted word.
	for _, dir := range []string{"/runs/my run/otel", "/runs/it's $HOME/`x`/*/otel", "/runs/a'b''c/otel"} {
		out := run("0", "gn1", "", "", dir, be)
		_, word, ok := strings.Cut(out, "gym-otel: read it: gym-otel-spank inspect ")
		word = strings.TrimSuffix(word, " (complete once the job has ended)\n")
		if !ok {
			t.Fatalf("%q: no read-it line in %q", dir, out)
		}
		back, err := exec.Command("bash", "-c", "printf %s "+word).Output()
		if err != nil || string(back) != dir {
			t.Errorf("%q: the shell reads %s as %q (%v)", dir, word, back, err)
		}
	}
}
