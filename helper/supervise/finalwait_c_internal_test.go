package supervise

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestFinalWaitC: the batch step's final wait (spank/hold.c through
// spank/controlsock.c, as slurmstepd runs it at the script's end) against
// this side's real handler of the control socket, on a socket of root's in
// a root-only dir as the prolog makes it. Root's request for the final
// scrape is taken (one pending), and the wait ends within a few polls once
// the handler says every target has a sample after the script's end, or
// that there is no target; while the samples are older than the script's
// end, or the job has other nodes that have not answered, it runs its whole
// bound and not much more. Another user's request gets nothing: no final
// scrape is queued, and its wait runs its whole bound.
func TestFinalWaitC(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the steps trust root's control socket only: run as root")
	}
	bin := testenv.FinalWaitDriver(t)
	srv, path := startControl(t)
	// wait runs the final wait of seconds for a job on nodes nodes and
	// returns its log and how long it took.
	wait := func(as []string, seconds, nodes int) (string, time.Duration) {
		t.Helper()
		argv := append(append(as, bin, path, strconv.Itoa(seconds)), strconv.Itoa(nodes))
		cmd := exec.Command(argv[0], argv[1:]...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: %v\n%s", argv, err, stderr.String())
		}
		return stderr.String(), time.Since(start)
	}
	// pending takes the queued final-scrape request: whether there was one.
	pending := func() bool {
		select {
		case <-srv.finals:
			return true
		default:
			return false
		}
	}
	// The hold's window (the record's final_wait) and the most past it a
	// wait may take: the last poll, the driver's start under the
	// sanitizers, and a loaded machine.
	const window, slack = 2, 2 * time.Second
	full := func(name, log string, took time.Duration) {
		t.Helper()
		if took < window*time.Second || took > window*time.Second+slack {
			t.Errorf("%s: the wait took %v, want its whole bound of %d s (at most %v more)\n%s", name, took, window, slack, log)
		}
		if !strings.Contains(log, "final-scrape wait done after") {
			t.Errorf("%s: the wait did not run to its end:\n%s", name, log)
		}
	}
	const short = 1500 * time.Millisecond // a few polls of 100 ms, under the sanitizers

	// Every target sampled after the script's end: the wait ends at the
	// first poll, and the request is queued.
	srv.set(2, time.Now().Add(time.Hour))
	log, took := wait(nil, 30, 1)
	if !pending() {
		t.Errorf("root's final-scrape request was not queued:\n%s", log)
	}
	if took > short || !strings.Contains(log, "every target on n1 has a sample after the script's last line: final-scrape wait ended") {
		t.Errorf("sampled after the end: took %v of 30 s\n%s", took, log)
	}
	// No scrape target on the node: ended at once too.
	srv.set(0, time.Time{})
	log, took = wait(nil, 30, 1)
	if !pending() || took > short || !strings.Contains(log, "no scrape target on n1: final-scrape wait ended") {
		t.Errorf("no targets: took %v of 30 s\n%s", took, log)
	}
	// The samples are older than the script's end: the whole bound, and
	// not much more.
	srv.set(2, time.Now().Add(-time.Hour))
	log, took = wait(nil, window, 1)
	if !pending() {
		t.Errorf("root's final-scrape request was not queued:\n%s", log)
	}
	full("sampled before the end", log, took)
	// Another user's request: not answered, nothing queued, and the
	// question is not answered either (the socket's dir is root's, 0700):
	// the whole bound although every target is sampled.
	srv.set(2, time.Now().Add(time.Hour))
	log, took = wait([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}, window, 1)
	if pending() {
		t.Errorf("another user's final-scrape request was queued:\n%s", log)
	}
	if !strings.Contains(log, "did not take the final-scrape request") {
		t.Errorf("another user's request was taken:\n%s", log)
	}
	full("another user", log, took)
	// A job on 3 nodes whose other nodes have not answered: this node's
	// samples do not end the wait (last: the node count stays set).
	log, took = wait(nil, window, 3)
	if !pending() {
		t.Errorf("root's final-scrape request for 3 nodes was not queued:\n%s", log)
	}
	full("3 nodes, the others silent", log, took)
}
