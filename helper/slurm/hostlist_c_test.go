package slurm

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestHostlistSameInC: the steps (C, spank/node.c) find their node's
// name as the n-th host of SLURM_STEP_NODELIST; for every list Slurm
// writes (one bracket group per name, as slurm_hostlist_ranged_string
// does on a one-dimensional cluster) each n gives ExpandHostlist's n-th
// name, and one past the end is refused.
func TestHostlistSameInC(t *testing.T) {
	bin := testenv.BuildCDriver(t, t.TempDir(), "hostlist", "node.c", `#include <stdio.h>
#include <stdlib.h>
#include "node.h"
spank_context_t spank_context(void) { return S_CTX_ERROR; }
spank_err_t spank_get_item(spank_t sp, spank_item_t item, ...) { (void)sp; (void)item; return ESPANK_ERROR; }
spank_err_t spank_getenv(spank_t sp, const char *var, char *buf, int len) { (void)sp; (void)var; (void)buf; (void)len; return ESPANK_ERROR; }
int main(int argc, char **argv) {
	char buf[256];
	(void)argc;
	if (gos_hostlist_nth(argv[1], (unsigned)atoi(argv[2]), buf, sizeof(buf)))
		printf("error\n");
	else
		printf("%s\n", buf);
	return 0;
}
`)
	nth := func(list string, n int) string {
		out, err := exec.Command(bin, list, strconv.Itoa(n)).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %d: %v %s", list, n, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, list := range []string{
		"gn1", "gn[1-3]", "gn[1-2],login01", "n[08-10,3]", "a[1],b[2-3]x,c",
		"node-[001-002],node-010", "gpu[7-12]", "x[0]", "dgx-a100-[0001-0003,0010]",
	} {
		want, err := ExpandHostlist(list)
		if err != nil {
			t.Fatalf("%s: %v", list, err)
		}
		for i, name := range want {
			if got := nth(list, i); got != name {
				t.Errorf("%s: host %d is %q in C, %q in Go", list, i, got, name)
			}
		}
		if got := nth(list, len(want)); got != "error" {
			t.Errorf("%s: host %d (past the end) is %q in C", list, len(want), got)
		}
	}
	for _, bad := range []string{"gn[1-", "gn[2-1]", "gn[a-b]"} {
		if got := nth(bad, 0); got != "error" {
			t.Errorf("%s: C gave %q", bad, got)
		}
	}
}
