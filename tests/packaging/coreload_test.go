package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// coreLoadDriver loads the Go core as the C front does in the prolog
// (spank/core.c: dlopen RTLD_NOW|RTLD_LOCAL, dlsym of the four exports)
// and makes a first call (gym_otel_core_free(NULL): every call into a
// c-shared library waits for the Go runtime's and the packages'
// initialization), in a fresh child process per sample since a loaded Go
// runtime is never unloaded. It prints one line per sample: the
// microseconds from dlopen to the first call's return.
const coreLoadDriver = `#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static long long now_us(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
int main(int argc, char **argv) {
	int n = argc > 2 ? atoi(argv[2]) : 20;
	for (int i = 0; i < n; i++) {
		int fd[2];
		if (pipe(fd)) return 2;
		pid_t pid = fork();
		if (pid < 0) return 2;
		if (pid == 0) {
			long long t0 = now_us();
			void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
			if (!h) { fprintf(stderr, "%s\n", dlerror()); _exit(3); }
			void (*fr)(char *) = (void (*)(char *))dlsym(h, "gym_otel_core_free");
			if (!fr || !dlsym(h, "gym_otel_core_submit") || !dlsym(h, "gym_otel_core_prolog") || !dlsym(h, "gym_otel_core_epilog")) _exit(4);
			fr(NULL);
			long long us = now_us() - t0;
			if (write(fd[1], &us, sizeof(us)) != sizeof(us)) _exit(5);
			_exit(0);
		}
		close(fd[1]);
		long long us = -1;
		int st;
		if (read(fd[0], &us, sizeof(us)) != sizeof(us)) us = -1;
		close(fd[0]);
		waitpid(pid, &st, 0);
		if (us < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) return 1;
		printf("%lld\n", us);
	}
	return 0;
}
`

// TestCoreLoadTime measures what loading the Go core costs the prolog:
// dlopen of build/gym_otel_core.so (make build), the Go runtime's and the
// packages' initialization and the first call, 20 times, each in a fresh
// process; it logs every sample and the median (GYM_OTEL_CORE, when set,
// names another core to measure). It fails only when the core cannot be
// loaded or called.
func TestCoreLoadTime(t *testing.T) {
	core := os.Getenv("GYM_OTEL_CORE")
	if core == "" {
		core = filepath.Join(testenv.Root(), "build", "gym_otel_core.so")
	}
	if _, err := os.Stat(core); err != nil {
		testenv.Missing(t, core+" (make build)")
	}
	cc, err := exec.LookPath("gcc")
	if err != nil {
		testenv.Missing(t, "gcc")
	}
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "coreload.c"), filepath.Join(dir, "coreload")
	if err := os.WriteFile(src, []byte(coreLoadDriver), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-std=gnu11", "-O2", "-Wall", "-Werror", "-o", bin, src, "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, core, "20").Output()
	if err != nil {
		t.Fatalf("loading %s: %v\n%s", core, err, out)
	}
	var samples []time.Duration
	for _, l := range strings.Fields(string(out)) {
		us, err := strconv.ParseInt(l, 10, 64)
		if err != nil {
			t.Fatalf("driver line %q: %v", l, err)
		}
		samples = append(samples, time.Duration(us)*time.Microsecond)
	}
	if len(samples) != 20 {
		t.Fatalf("%d samples, want 20:\n%s", len(samples), out)
	}
	t.Logf("core load (dlopen + Go runtime init + first call) of %s: %v", core, samples)
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	t.Logf("core load median %v (min %v, max %v, 20 samples)", (samples[9]+samples[10])/2, samples[0], samples[19])
}
