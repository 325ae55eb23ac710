package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BuildCDriver compiles the C front's file spank/<source> with a test
// driver (driver, C source text) into dir/<name>, with the plugin's own
// warnings (-Werror) and include paths, under AddressSanitizer and
// UBSan (a read past a buffer, a leak or undefined behaviour makes the
// driver exit non-zero with a report), and returns the binary. It skips
// (or fails, with real parts required) without gcc or Slurm's spank.h.
func BuildCDriver(t *testing.T, dir, name, source, driver string) string {
	t.Helper()
	return BuildCProgram(t, dir, name, driver, source)
}

// BuildCProgram is BuildCDriver for a driver linked with several of the C
// front's files (sources, each spank/<source>).
func BuildCProgram(t *testing.T, dir, name, driver string, sources ...string) string {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		Missing(t, "gcc")
	}
	if _, err := os.Stat("/usr/include/slurm/spank.h"); err != nil {
		Missing(t, "slurm/spank.h (libslurm-dev)")
	}
	main := filepath.Join(dir, name+"-main.c")
	if err := os.WriteFile(main, []byte(driver), 0o600); err != nil {
		t.Fatal(err)
	}
	root := Root()
	bin := filepath.Join(dir, name)
	args := []string{"-std=gnu11", "-Wall", "-Wextra", "-Werror", "-g",
		"-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-I" + filepath.Join(root, "spank"),
		"-I" + filepath.Join(root, "include"), "-o", bin}
	for _, s := range sources {
		args = append(args, filepath.Join(root, "spank", s))
	}
	if out, err := exec.Command(cc, append(args, main)...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

// HoldDriver compiles spank/controlsock.c (root's exchanges with the
// supervisor on its control socket) with BuildCDriver and a driver that
// prints gos_hold_sampled's answer, `hold <path> <since_ms>`, or
// gos_hold_final's with a node count of 1, `hold <path> final`
// (FinalWaitDriver runs the whole final wait of spank/hold.c).
func HoldDriver(t *testing.T) string {
	t.Helper()
	return BuildCDriver(t, t.TempDir(), "hold", "controlsock.c", `#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "controlsock.h"
int main(int argc, char **argv) {
	if (argc != 3)
		return 2;
	if (!strcmp(argv[2], "final"))
		printf("%d\n", gos_hold_final(argv[1], 1));
	else
		printf("%d\n", gos_hold_sampled(argv[1], atoll(argv[2])));
	return 0;
}
`)
}

// PhaseDriver compiles spank/phase.c (a step's start and end told to the
// supervisor) with spank/controlsock.c, its client of the control socket, and a
// driver that plays slurmstepd's calls for one step on the control socket at
// path: `phase <path> <step id> <wait status|-> ...`, one task_exit per
// status ("-": none). It prints "traceparent=<what the step's tasks get>"
// on stdout, and the plugin's debug lines (slurm_debug) on stderr.
func PhaseDriver(t *testing.T) string {
	t.Helper()
	return BuildCProgram(t, t.TempDir(), "phase", `#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phase.h"
static int status;
spank_err_t spank_get_item(spank_t sp, spank_item_t item, ...) {
	va_list ap;
	(void)sp;
	if (item != S_TASK_EXIT_STATUS)
		return ESPANK_ERROR;
	va_start(ap, item);
	*va_arg(ap, int *) = status;
	va_end(ap);
	return ESPANK_SUCCESS;
}
void slurm_debug(const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}
int main(int argc, char **argv) {
	struct gos_record r;
	char tp[GOS_TRACEPARENT_LEN + 1];
	if (argc < 3)
		return 2;
	memset(&r, 0, sizeof(r));
	r.ready = 1;
	snprintf(r.control_socket, sizeof(r.control_socket), "%s", argv[1]);
	gos_phase_step_start(NULL, 42, (uint32_t)strtoul(argv[2], NULL, 10), &r, tp);
	printf("traceparent=%s\n", tp);
	for (int i = 3; i < argc; i++) {
		if (!strcmp(argv[i], "-"))
			continue;
		status = atoi(argv[i]);
		gos_phase_task_exit(NULL);
	}
	gos_phase_task_exit_done();
	gos_phase_step_end();
	return 0;
}
`, "phase.c", "controlsock.c")
}

// FinalWaitDriver compiles spank/hold.c (the batch step's final wait after
// the script's last line) with spank/controlsock.c, its client of the
// control socket, and a driver that plays slurmstepd's task_exit of a
// batch script that exited 0 in job 42 on node n1: `final-wait <path>
// <seconds> <nodes>` runs gos_hold for up to seconds with the job's node
// count nodes (SLURM_JOB_NUM_NODES; "0": not known) against the control
// socket at path. slurmctld never answers (the wait is not cut short as
// ending). The plugin's log lines (slurm_info, slurm_debug) go to stderr.
func FinalWaitDriver(t *testing.T) string {
	t.Helper()
	return BuildCProgram(t, t.TempDir(), "final-wait", `#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compat.h"
#include "hold.h"
static const char *nodes;
spank_err_t spank_get_item(spank_t sp, spank_item_t item, ...) {
	va_list ap;
	(void)sp;
	if (item != S_TASK_EXIT_STATUS)
		return ESPANK_ERROR;
	va_start(ap, item);
	*va_arg(ap, int *) = 0;
	va_end(ap);
	return ESPANK_SUCCESS;
}
spank_err_t spank_getenv(spank_t sp, const char *var, char *buf, int len) {
	(void)sp;
	if (strcmp(var, "SLURM_JOB_NUM_NODES") || (int)strlen(nodes) >= len)
		return ESPANK_ENV_NOEXIST;
	strcpy(buf, nodes);
	return ESPANK_SUCCESS;
}
#if GOS_SLURM_AT_LEAST(26, 5)
int slurm_load_job(job_info_msg_t **resp, slurm_step_id_t id, uint16_t show_flags) {
	(void)id;
#else
int slurm_load_job(job_info_msg_t **resp, uint32_t job_id, uint16_t show_flags) {
	(void)job_id;
#endif
	(void)show_flags;
	*resp = NULL;
	return SLURM_ERROR;
}
void slurm_free_job_info_msg(job_info_msg_t *msg) {
	(void)msg;
}
static void say(const char *fmt, va_list ap) {
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}
void slurm_info(const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	say(fmt, ap);
	va_end(ap);
}
void slurm_debug(const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	say(fmt, ap);
	va_end(ap);
}
int main(int argc, char **argv) {
	if (argc != 4)
		return 2;
	nodes = argv[3];
	gos_hold(NULL, 42, atoi(argv[2]), "n1", argv[1]);
	return 0;
}
`, "hold.c", "controlsock.c")
}
