package plugin_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/delivery"
	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
)

// TestFileDeliveryNormalJob: a job with the default otel.delivery (files)
// whose backend is up. Its collector has no backend exporter; the supervisor delivered
// the files from the checkpoint: the backend holds exactly the items of
// the files (the appended lines included), the receipt says the backend's
// copy is complete, and replay has nothing to send (exit 0).
func TestFileDeliveryNormalJob(t *testing.T) {
	waitIdle(t)
	id, otel := receiptJob(t, "fdel", "")
	cfg, err := os.ReadFile(filepath.Join(otel, "collector.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(cfg), "otlp_http/backend") {
		t.Error("collector.yaml has a backend exporter with the default delivery (files)")
	}
	rc, err := receipt.Read(otel)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("receipt:\n%s", strings.Join(rc.Summary(), "\n"))
	if rc.Delivery == nil || !rc.Delivery.Complete() || rc.Delivery.Rejected != 0 {
		t.Fatalf("receipt's delivery %+v: want the backend's copy complete", rc.Delivery)
	}
	files := dirItems(t, otel, "")
	if be := waitBackend(t, id, files); be != files {
		t.Errorf("the backend holds %+v of job %s, the files %+v", be, id, files)
	}
	if n := int64(files.spans + files.points + files.logs); rc.Delivery.Accepted != n {
		t.Errorf("the receipt counts %d items acknowledged, the files hold %d", rc.Delivery.Accepted, n)
	}
	for _, a := range rc.Appended {
		if !a.Delivered {
			t.Errorf("appended line %+v: want delivered from the files", a)
		}
	}
	// The collector's figures: written = the file's items less the lines
	// appended after its exit; it sent nothing itself (no backend
	// exporter), so nothing counts as sent or lost.
	for sig, n := range map[string]int{"traces": files.spans - int(rc.AppendedSpans()), "metrics": files.points - int(rc.AppendedPoints()), "logs": files.logs} {
		if c := rc.Signals[sig]; c.Written != int64(n) || c.Sent != 0 || c.Lost() != 0 {
			t.Errorf("receipt %s %+v: want written = %d (the file's, less the appended), nothing sent or lost by the collector", sig, c, n)
		}
	}
	r := asUser(t, 60*time.Second, tokenEnv(), fmt.Sprintf("%s/gym-otel-spank replay --site %s/site.yaml --endpoint http://127.0.0.1:%s %s",
		plugDir, plugDir, backendPort, filepath.Dir(otel)))
	t.Logf("replay: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	if r.code != 0 || !strings.Contains(r.stdout, "nothing to send") {
		t.Errorf("replay of a complete delivery: exit %d, want nothing to send and 0", r.code)
	}
	waitIdle(t)
}

// TestFileDeliveryBackendDownThenReplay: a job with the default
// otel.delivery (files) whose backend is down until after its end. The receipt and inspect say
// the backend's copy is incomplete and how many items replay sends; replay
// to the suite's backend sends exactly those, the backend then holds
// exactly the files' items, and a second replay sends nothing.
func TestFileDeliveryBackendDownThenReplay(t *testing.T) {
	waitIdle(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().(*net.TCPAddr).Port
	l.Close()
	id, otel := receiptJob(t, "fdown", fmt.Sprintf(",endpoint=http://127.0.0.1:%d", dead))
	rc, err := receipt.Read(otel)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("receipt:\n%s", strings.Join(rc.Summary(), "\n"))
	files := dirItems(t, otel, "")
	n := int64(files.spans + files.points + files.logs)
	if d := rc.Delivery; d == nil || d.Complete() || d.Backlog != n || d.Accepted != 0 {
		t.Fatalf("receipt's delivery %+v: want all %d items of the files past the checkpoint", rc.Delivery, n)
	}
	r := asUser(t, 30*time.Second, nil, fmt.Sprintf("%s/gym-otel-spank inspect %s", plugDir, otel))
	if !strings.Contains(r.stdout, fmt.Sprintf("backend copy INCOMPLETE: %d items", n)) {
		t.Errorf("inspect does not say the backend's copy is incomplete by %d items:\n%s", n, r.stdout)
	}
	if got := backendItems(t, id); got != (items{}) {
		t.Fatalf("the backend already holds %+v of job %s", got, id)
	}
	replay := fmt.Sprintf("%s/gym-otel-spank replay --site %s/site.yaml --endpoint http://127.0.0.1:%s %s", plugDir, plugDir, backendPort, filepath.Dir(otel))
	r = asUser(t, 120*time.Second, tokenEnv(), replay)
	t.Logf("replay: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("sending %d items", n)) || !strings.Contains(r.stdout, fmt.Sprintf("accepted %d items", n)) {
		t.Fatalf("replay: exit %d: want exactly the %d missing items sent and accepted", r.code, n)
	}
	if got := waitBackend(t, id, files); got != files {
		t.Errorf("the backend holds %+v of job %s after the replay; the files hold %+v", got, id, files)
	}
	bl, err := delivery.Backlogs(otel)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range bl {
		if b.Lines != 0 {
			t.Errorf("%s: %d lines still past the checkpoint after the replay", name, b.Lines)
		}
	}
	r = asUser(t, 60*time.Second, tokenEnv(), replay)
	if r.code != 0 || !strings.Contains(r.stdout, "nothing to send") {
		t.Errorf("a second replay: exit %d, want nothing to send and 0\n%s", r.code, r.stdout)
	}
	r = asUser(t, 30*time.Second, nil, fmt.Sprintf("%s/gym-otel-spank inspect %s", plugDir, otel))
	if !strings.Contains(r.stdout, "backend copy COMPLETE") {
		t.Errorf("inspect after the replay does not say the backend's copy is complete:\n%s", r.stdout)
	}
	waitIdle(t)
}

// TestFileDeliveryHungBackend: a job with the default otel.delivery
// (files) whose backend accepts connections and never answers. The
// epilog waited for the supervisor's own end and ended within its
// deadline; the receipt says the backend's copy is incomplete, every item
// of the files past the checkpoint (nothing acknowledged), and why; the
// files are intact and a replay to the suite's backend sends exactly them.
func TestFileDeliveryHungBackend(t *testing.T) {
	waitIdle(t)
	port := startHungBackend(t)
	id, otel := receiptJob(t, "fhung", fmt.Sprintf(",endpoint=http://127.0.0.1:%d", port))
	rc, err := receipt.Read(otel)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("receipt:\n%s", strings.Join(rc.Summary(), "\n"))
	checkEpilogWaited(t, id)
	files := dirItems(t, otel, "")
	n := int64(files.spans + files.points + files.logs)
	if d := rc.Delivery; d == nil || d.Complete() || d.Accepted != 0 || d.Backlog != n || d.Error == "" {
		t.Fatalf("receipt's delivery %+v: want all %d items of the files past the checkpoint, with the reason", rc.Delivery, n)
	}
	if !rc.Complete() {
		t.Errorf("receipt basis %q: a hung backend must not cost the collector's final figures (it has no backend exporter)", rc.Basis)
	}
	replay := fmt.Sprintf("%s/gym-otel-spank replay --site %s/site.yaml --endpoint http://127.0.0.1:%s %s", plugDir, plugDir, backendPort, filepath.Dir(otel))
	r := asUser(t, 120*time.Second, tokenEnv(), replay)
	t.Logf("replay: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("sending %d items", n)) {
		t.Fatalf("replay: exit %d: want exactly the %d items of the files sent", r.code, n)
	}
	if got := waitBackend(t, id, files); got != files {
		t.Errorf("the backend holds %+v of job %s after the replay; the files hold %+v", got, id, files)
	}
	waitIdle(t)
}
