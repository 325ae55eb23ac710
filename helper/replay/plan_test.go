package replay_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/replay"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
)

// nodeSpans writes dir/traces.jsonl: one line of n spans named name
// (and the minimal collector.yaml a job dir has).
func nodeSpans(t *testing.T, dir, name string, n int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var spans []string
	for i := 0; i < n; i++ {
		spans = append(spans, fmt.Sprintf(`{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"%016x","name":"%s","kind":1,"startTimeUnixNano":"1700000000000000000","endTimeUnixNano":"1700000001000000000"}`, i+1, name))
	}
	line := `{"resourceSpans":[{"resource":{"attributes":[{"key":"host.name","value":{"stringValue":"` + name + `"}}]},"scopeSpans":[{"spans":[` + strings.Join(spans, ",") + `]}]}]}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "traces.jsonl"), []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, jobdir.ConfigFile), []byte("exporters:\n  otlp_http/backend:\n    timeout: 5s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// nodeReceipt writes dir/receipt.json of node: its collector wrote
// written spans, the backend accepted sent of them and lost lost; basis
// and unknown as given.
func nodeReceipt(t *testing.T, dir, node string, written, sent, lost int64, basis string, unknown ...string) *receipt.Receipt {
	t.Helper()
	r := &receipt.Receipt{JobID: "77", Node: node, Basis: basis, Collectors: 1, Unknown: unknown,
		Signals: map[string]receipt.Counts{"traces": {Received: written, Written: written, Sent: sent, EnqueueFailed: lost}}}
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	return r
}

// Which node dirs replay sends, from their receipts: everything delivered
// (skipped, folded into one line with a hostlist when several agree), a
// loss, figures that are not final, no receipt, files holding more than
// the receipt counts (an earlier run in the same dir) and undelivered
// appended lines (only those sent); each dir sent whole says why and how
// many items the backend will get again. --all sends every dir.
func TestPlans(t *testing.T) {
	otel := filepath.Join(t.TempDir(), "otel")
	node := func(n string) string { return filepath.Join(otel, "nodes", n) }
	nodeSpans(t, otel, "gn1", 5)
	nodeReceipt(t, otel, "gn1", 5, 5, 0, receipt.BasisFinal)
	for _, n := range []string{"gn2", "gn3"} {
		nodeSpans(t, node(n), n, 5)
		nodeReceipt(t, node(n), n, 5, 5, 0, receipt.BasisFinal)
	}
	nodeSpans(t, node("gn4"), "gn4", 10)
	nodeReceipt(t, node("gn4"), "gn4", 10, 7, 3, receipt.BasisFinal)
	nodeSpans(t, node("gn5"), "gn5", 4)
	nodeReceipt(t, node("gn5"), "gn5", 2, 2, 0, receipt.BasisLastRead, "the collector was killed")
	nodeSpans(t, node("gn6"), "gn6", 4)
	nodeSpans(t, node("gn7"), "gn7", 6) // 2 more than its receipt counts
	nodeReceipt(t, node("gn7"), "gn7", 4, 4, 0, receipt.BasisFinal)
	nodeSpans(t, node("gn8"), "gn8", 3) // 2 by its collector, 1 appended, not delivered
	r := &receipt.Receipt{JobID: "77", Node: "gn8", Basis: receipt.BasisFinal, Collectors: 1,
		Signals:  map[string]receipt.Counts{"traces": {Received: 2, Written: 2, Sent: 2}},
		Appended: []receipt.Appended{{File: "traces.jsonl", Offset: 0, Length: 10, Spans: 1, Cause: "the backend answered 503"}}}
	if err := r.Write(node("gn8")); err != nil {
		t.Fatal(err)
	}
	// A link's node, delivered: its own line.
	nodeSpans(t, filepath.Join(otel, "links", "78", "nodes", "gn1"), "gn1", 2)
	nodeReceipt(t, filepath.Join(otel, "links", "78", "nodes", "gn1"), "gn1", 2, 2, 0, receipt.BasisFinal)

	dirs, _ := jobdir.NodeDirs(otel, nil)
	plans, err := replay.Plans(dirs)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, p := range plans {
		k := p.Name
		if p.Link != "" {
			k += "@" + p.Link
		}
		kinds[k] = fmt.Sprintf("%s whole=%t", p.Kind, p.Whole)
	}
	want := map[string]string{
		"gn1": "complete whole=false", "gn2": "complete whole=false", "gn3": "complete whole=false",
		"gn4": "lost whole=true", "gn5": "not final whole=true", "gn6": "no receipt whole=true",
		"gn7": "uncounted whole=true", "gn8": "complete whole=false", "gn1@78": "complete whole=false",
	}
	if fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Errorf("plans %v\nwant  %v", kinds, want)
	}
	got := strings.Join(replay.PlanLines(plans, false), "\n")
	t.Logf("lines:\n%s", got)
	for _, w := range []string{
		"replay: skipped 3 nodes gn[1-3]: their receipts say the backend accepted everything their collectors took (final figures, nothing failed; 15 items in their files)",
		"replay: sending gn4 whole: its receipt says the backend did not get 3 of its items; the files cannot tell which, so the 7 items the backend already had from it will arrive again",
		"replay: sending gn5 whole: its figures are not final (the collector was killed): what the backend missed is not known; at least 2 items the backend already had from it will arrive again",
		"replay: sending gn6 whole: no receipt.json (its collector has not drained, or its supervisor was killed before it could write one): what the backend has from it is not known; whatever the backend already had from it will arrive again",
		"replay: sending gn7 whole: its files hold 2 items more than its receipt counts as written (an earlier run of the job wrote to the same dir: a requeue, or a chain sharing the job dir); the files cannot tell which the backend has, so the 4 items the backend already had from it will arrive again",
		"replay: gn8: its receipt says the backend accepted everything its collector took (final figures, nothing failed); sending only the 1 line appended after its collector's exit that the backend did not take at the drain",
		"replay: skipped gn1 of link 78: its receipt says the backend accepted everything its collector took (final figures, nothing failed; 2 items in its files)",
	} {
		if !strings.Contains(got, w+"\n") && !strings.HasSuffix(got, w) {
			t.Errorf("no line\n%s", w)
		}
	}
	if n := strings.Count(got, "\n") + 1; n != 7 {
		t.Errorf("%d lines, want 7 (gn[1-3] folded into one)", n)
	}
	all := strings.Join(replay.PlanLines(plans, true), "\n")
	if !strings.Contains(all, "replay: sending 4 nodes gn[1-3,8] whole (--all): their receipts say the backend accepted everything their collectors took (final figures, nothing failed): the 17 items the backend already had from them will arrive again") {
		t.Errorf("--all lines:\n%s", all)
	}
}

// replay against a real backend: of two nodes, the one whose receipt says
// everything was delivered is skipped and the one whose receipt says
// items were lost is sent whole (the backend gets its spans, not the
// other's); --all sends both; a job whose receipts say nothing was lost
// sends nothing, starts no collector, needs no token, and exits 0.
func TestReplayOnlyWhatTheReceiptsMiss(t *testing.T) {
	t.Parallel()
	job := t.TempDir()
	otel := filepath.Join(job, "otel")
	nodeSpans(t, otel, "gn1", 6)
	nodeReceipt(t, otel, "gn1", 6, 6, 0, receipt.BasisFinal)
	lost := filepath.Join(otel, "nodes", "gn2")
	nodeSpans(t, lost, "gn2", 9)
	nodeReceipt(t, lost, "gn2", 9, 5, 4, receipt.BasisFinal)

	token := "pl-" + harness.RandHex(8)
	be := harness.StartBackend(t, token)
	out, code := runReplay(t, []string{"OTEL_TOKEN=" + token}, "--endpoint", be.URL, "--token-env", "OTEL_TOKEN", job)
	t.Logf("replay:\n%s", out)
	be.Stop(t)
	tr := otlptest.MustRead(t, be.Dir, "traces")
	if code != 0 || !strings.Contains(out, "replay complete") || tr.SpanCount("gn1") != 0 || tr.SpanCount("gn2") != 9 {
		t.Errorf("replay: exit %d; the backend got %d spans of gn1 (want 0: its receipt says it has them) and %d of gn2 (want 9)\n%s", code, tr.SpanCount("gn1"), tr.SpanCount("gn2"), out)
	}
	for _, w := range []string{
		"replay: skipped gn1: its receipt says the backend accepted everything its collector took (final figures, nothing failed; 6 items in its files)\n",
		"replay: sending gn2 whole: its receipt says the backend did not get 4 of its items; the files cannot tell which, so the 5 items the backend already had from it will arrive again\n",
		"replay: 1 file(s) to " + be.URL,
		"traces  1 file: read 9 of 9 spans (0 refused); backend: 9 of 9 spans accepted, 0 failed, 0 pending\n",
		"of the items sent, 5 the backend had already accepted (the receipts say so): each it accepts again it holds twice\n",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("replay's output has no %q", w)
		}
	}

	// --all: both nodes, whole.
	be = harness.StartBackend(t, token)
	out, code = runReplay(t, []string{"OTEL_TOKEN=" + token}, "--all", "--endpoint", be.URL, "--token-env", "OTEL_TOKEN", job)
	t.Logf("replay --all:\n%s", out)
	be.Stop(t)
	tr = otlptest.MustRead(t, be.Dir, "traces")
	if code != 0 || tr.SpanCount("gn1") != 6 || tr.SpanCount("gn2") != 9 ||
		!strings.Contains(out, "replay: sending gn1 whole (--all): its receipt says the backend accepted everything its collector took (final figures, nothing failed): the 6 items the backend already had from it will arrive again") ||
		!strings.Contains(out, "of the items sent, 11 the backend had already accepted") {
		t.Errorf("replay --all: exit %d; the backend got %d spans of gn1 (want 6) and %d of gn2 (want 9)\n%s", code, tr.SpanCount("gn1"), tr.SpanCount("gn2"), out)
	}

	// Nothing lost anywhere: nothing sent, no collector, no token needed.
	nodeReceipt(t, lost, "gn2", 9, 9, 0, receipt.BasisFinal)
	be = harness.StartBackend(t, token)
	out, code = runReplay(t, nil, "--endpoint", be.URL, "--token-env", "OTEL_TOKEN", job)
	t.Logf("replay of a clean job:\n%s", out)
	be.Stop(t)
	tr = otlptest.MustRead(t, be.Dir, "traces")
	if code != 0 || len(tr.Spans) != 0 || strings.Contains(out, "collector pid") ||
		!strings.Contains(out, "replay: skipped 2 nodes gn[1-2]: their receipts say the backend accepted everything their collectors took (final figures, nothing failed; 15 items in their files)\n") ||
		!strings.Contains(out, "replay: nothing left to send: the receipts say the backend accepted everything the job's collectors took (2 node dirs; --all sends every dir again)\n") {
		t.Errorf("replay of a job without losses: exit %d, the backend got %d spans (want 0)\n%s", code, len(tr.Spans), out)
	}
}

// A node dir whose receipt says remote export was off (otel.delivery:
// none) is sent whole, and its line says the backend has none of it.
func TestPlanRemoteExportOff(t *testing.T) {
	otel := filepath.Join(t.TempDir(), "otel")
	nodeSpans(t, otel, "gn1", 4)
	r := &receipt.Receipt{JobID: "77", Node: "gn1", Basis: receipt.BasisFinal, Collectors: 1, RemoteExportOff: true,
		Signals: map[string]receipt.Counts{"traces": {Received: 4, Written: 4}}}
	if err := r.Write(otel); err != nil {
		t.Fatal(err)
	}
	dirs, _ := jobdir.NodeDirs(otel, nil)
	plans, err := replay.Plans(dirs)
	if err != nil {
		t.Fatal(err)
	}
	if len(plans) != 1 || plans[0].Kind != replay.KindNeverSent || !plans[0].Whole || plans[0].Items != 4 {
		t.Fatalf("plans %+v: want gn1 sent whole, never sent", plans)
	}
	line := strings.Join(replay.PlanLines(plans, false), "\n")
	if !strings.Contains(line, "sending gn1 whole") || !strings.Contains(line, "remote export was off") || !strings.Contains(line, "none of its 4 items") {
		t.Errorf("plan line %q", line)
	}
}
