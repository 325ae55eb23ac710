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
	if out, err := exec.Command(cc, "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-g",
		"-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-I"+filepath.Join(root, "spank"),
		"-I"+filepath.Join(root, "include"), "-o", bin, filepath.Join(root, "spank", source), main).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

// HoldDriver compiles spank/holdsock.c (root's exchanges with the
// supervisor on its hold socket) with BuildCDriver and a driver that
// prints gos_hold_sampled's answer, `hold <path> <since_ms>`, or
// gos_hold_final's for a one-node job, `hold <path> final`.
func HoldDriver(t *testing.T) string {
	t.Helper()
	return BuildCDriver(t, t.TempDir(), "hold", "holdsock.c", `#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "holdsock.h"
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
