package plugin_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestRemoteExportOff: a job submitted with otel.delivery=none from a
// shell that holds no token (remote export off: the files only). The
// submit says remote export is off; the collector's configuration has no
// backend exporter and names no backend token; the files hold the job's
// data; the receipt says nothing was sent by choice and nothing lost;
// the suite's backend gets nothing of the job; inspect says so; and a
// replay sends the files to the backend afterwards.
func TestRemoteExportOff(t *testing.T) {
	waitIdle(t)
	gym := testenv.Standin(t, "gym-standin")
	if out, err := run("install", "-m", "0755", gym, filepath.Join(plugDir, "gym-standin")); err != nil {
		t.Fatalf("install: %v %s", err, out)
	}
	tag := "noexp-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	jobDir := filepath.Join(jobsDir, "otel-"+tag)
	outFile := filepath.Join(jobsDir, tag+".out")
	script := writeScript(t, tag+".sh", fmt.Sprintf("%s/gym-standin --rollouts 3 || exit 9\n", plugDir))
	r := asUser(t, 120*time.Second, nil, fmt.Sprintf("env -u OTEL_TOKEN sbatch --wait --gym-otel=job_dir=%s,delivery=none -o %s %s", jobDir, outFile, script))
	out, _ := os.ReadFile(outFile)
	if r.code != 0 {
		t.Fatalf("sbatch without a token, delivery=none: exit %d %s\n%s", r.code, r.stderr, out)
	}
	if !strings.Contains(r.stderr, "remote export is off") {
		t.Errorf("sbatch's warnings do not say remote export is off:\n%s", r.stderr)
	}
	if !strings.Contains(string(out), "not shipped (no backend)") {
		t.Errorf("the job's output does not say its telemetry is not shipped:\n%s", out)
	}
	id := jobIDOf(t, r)
	waitNoCollector(t)
	otel := filepath.Join(jobDir, "otel")
	cfg, err := os.ReadFile(filepath.Join(otel, "collector.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"otlp_http/backend", "OTEL_TOKEN"} {
		if strings.Contains(string(cfg), s) {
			t.Errorf("collector.yaml of a job with remote export off names %s", s)
		}
	}
	files := dirItems(t, otel, "")
	if files.spans == 0 || files.points == 0 {
		t.Fatalf("the files hold %+v: want the job's spans and metric points", files)
	}
	rc, err := receipt.Read(otel)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("receipt:\n%s", strings.Join(rc.Summary(), "\n"))
	if !rc.RemoteExportOff || !rc.Complete() || rc.Trouble() || rc.Delivery != nil || len(rc.Unknown) > 0 {
		t.Errorf("receipt: remote_export_off %v complete %v trouble %v delivery %+v unknown %q: want off, final, no trouble",
			rc.RemoteExportOff, rc.Complete(), rc.Trouble(), rc.Delivery, rc.Unknown)
	}
	for sig, c := range rc.Signals {
		if c.Sent != 0 || c.Lost() != 0 {
			t.Errorf("receipt's %s: sent %d lost %d, want nothing sent and nothing lost", sig, c.Sent, c.Lost())
		}
	}
	time.Sleep(2 * time.Second)
	if got := backendItems(t, id); got != (items{}) {
		t.Errorf("the backend holds %+v of job %s, whose remote export is off", got, id)
	}
	ins := asUser(t, 30*time.Second, nil, fmt.Sprintf("%s/gym-otel-spank inspect %s", plugDir, otel))
	if ins.code != 0 || !strings.Contains(ins.stdout, "remote export off") || strings.Contains(ins.stdout, "LOST") {
		t.Errorf("inspect: exit %d, want it to say remote export off and nothing lost:\n%s%s", ins.code, ins.stdout, ins.stderr)
	}
	rp := asUser(t, 90*time.Second, tokenEnv(), fmt.Sprintf("%s/gym-otel-spank replay --binary %s --timeout 60s --site %s/site.yaml --endpoint http://127.0.0.1:%s %s",
		plugDir, testenv.Collector(t), plugDir, backendPort, jobDir))
	t.Logf("replay: exit %d\n%s%s", rp.code, rp.stdout, rp.stderr)
	if rp.code != 0 || !strings.Contains(rp.stdout+rp.stderr, "remote export was off") {
		t.Fatalf("replay of a job with remote export off: exit %d, want 0 and a line saying remote export was off", rp.code)
	}
	if be := waitBackend(t, id, files); be != files {
		t.Errorf("after replay the backend holds %+v of job %s, the files %+v", be, id, files)
	}
	waitIdle(t)
}
