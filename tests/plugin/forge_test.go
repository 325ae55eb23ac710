package plugin_test

import (
	"encoding/json"
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
	"github.com/gym-otel-spank/gym-otel-spank/helper/inspect"
	"github.com/gym-otel-spank/gym-otel-spank/internal/slurmkit"
)

// forgedTrace is the trace id of the spans the job's task forges.
const forgedTrace = "0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f"

// TestForgedPhaseSpans: a task of the job posts spans that look like the
// plugin's Slurm phases (the phase scope, service.name slurm, the plugin's
// mark gym_otel.source=slurm itself, slurm.job, slurm.prolog and a
// slurm.step of step 0 lasting a minute) to the job's collector with the
// receiver token of its task environment. The collector takes them (HTTP
// 200) and writes them without the mark; inspect does not show them as
// Slurm's (its phases are the plugin's own, step 0 as long as it ran) and
// says how many spans looked like Slurm's phases but were sent by the job,
// in the text and the JSON; the real phases are all there, each with the
// mark (slurmkit.CheckNodePhases).
func TestForgedPhaseSpans(t *testing.T) {
	waitIdle(t)
	d := markerDir(t, "forged-phases")
	now := time.Now().UnixNano()
	span := func(id, name string, attrs string) string {
		return fmt.Sprintf(`{"traceId":%q,"spanId":%q,"name":%q,"kind":1,"startTimeUnixNano":"%d","endTimeUnixNano":"%d","attributes":[{"key":"slurm.node","value":{"stringValue":"gn1"}}%s]}`,
			forgedTrace, id, name, now-120e9, now-60e9, attrs)
	}
	body := `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"slurm"}},` +
		`{"key":"host.name","value":{"stringValue":"gn1"}},{"key":"` + contract.SourceKey + `","value":{"stringValue":"` + contract.SourceSlurm + `"}}]},` +
		`"scopeSpans":[{"scope":{"name":"` + contract.PhaseScope + `"},"spans":[` +
		span("f000000000000001", vocab.SpanJob, "") + "," +
		span("f000000000000002", vocab.SpanProlog, `,{"key":"slurm.start_known","value":{"boolValue":true}}`) + "," +
		span("f000000000000003", vocab.SpanStep, `,{"key":"slurm.step.id","value":{"stringValue":"0"}}`) + `]}]}]}`
	if err := os.WriteFile(filepath.Join(d, "forged.json"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	// The task's token: OTEL_EXPORTER_OTLP_HEADERS is
	// Authorization=Bearer%20<token>.
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf(`
h=${OTEL_EXPORTER_OTLP_HEADERS#Authorization=}
h=${h//%%20/ }
code=$(curl -s -m 10 -o /dev/null -w '%%{http_code}' -XPOST -H 'Content-Type: application/json' -H "Authorization: $h" --data @%[1]s/forged.json "$OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces")
echo "forged=$code"
srun -n1 true
echo done
`, d))
	r := asUser(t, 120*time.Second, tokenEnv(), fmt.Sprintf("sbatch --wait -w gn1 --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, script))
	out, _ := os.ReadFile(filepath.Join(d, "job.out"))
	if r.code != 0 {
		t.Fatalf("exit %d: %s\n%s", r.code, r.stderr, out)
	}
	if !strings.Contains(string(out), "forged=200") {
		t.Fatalf("the task's post of the lookalike spans was not taken (want HTTP 200 with the task's token):\n%s", out)
	}
	job := jobIDOf(t, r)
	waitNoCollector(t)
	otel := filepath.Join(d, "run", "otel")

	var real []phaseSpan
	forged := 0
	for _, s := range phaseSpans(t, otel) {
		if s.Trace != forgedTrace {
			real = append(real, s)
			continue
		}
		forged++
		if _, ok := s.Resource[contract.SourceKey]; ok {
			t.Errorf("the task's %s span arrived with %s: %v", s.Name, contract.SourceKey, s.Resource)
		}
	}
	if forged != 3 {
		t.Errorf("%d of the task's 3 lookalike spans in traces.jsonl", forged)
	}
	ns := slurmkit.CheckNodePhases(t, real, slurmkit.NodePhases{Node: "gn1",
		Identity: map[string]string{"slurm_job_id": job}, Steps: map[string]int{"0": 0}, Batch: true})

	cli := filepath.Join(root, "build", "gym-otel-spank")
	js, err := exec.Command(cli, "inspect", "--json", filepath.Join(d, "run")).Output()
	if err != nil {
		t.Fatalf("inspect --json: %v", err)
	}
	var rep inspect.Report
	if err := json.Unmarshal(js, &rep); err != nil {
		t.Fatal(err)
	}
	text, err := exec.Command(cli, "inspect", filepath.Join(d, "run")).CombinedOutput()
	if err != nil {
		t.Fatalf("inspect: %v\n%s", err, text)
	}
	t.Logf("inspect:\n%s", text)
	if rep.JobLookalikes.PhaseSpans != 3 {
		t.Errorf("inspect --json: job_lookalikes %+v, want 3 phase spans", rep.JobLookalikes)
	}
	if !strings.Contains(strings.Join(strings.Fields(string(text)), " "),
		"3 spans looked like the plugin's Slurm phases but were sent by the job and are not counted as Slurm's") {
		t.Errorf("inspect's text does not say the 3 spans were the job's")
	}
	if len(rep.Phases) != 1 {
		t.Fatalf("inspect: phases of %d runs, want the job's one: %+v", len(rep.Phases), rep.Phases)
	}
	np := rep.Phases[0]
	if np.TraceID == forgedTrace || np.JobID != job {
		t.Errorf("inspect's phases: trace %s job %s, want the plugin's of job %s", np.TraceID, np.JobID, job)
	}
	got := map[string]int{}
	for _, p := range np.Phases {
		got[p.Name+"/"+p.Step]++
		if p.Name == vocab.SpanStep && p.Step == "0" && p.DurationSeconds.Known() && float64(p.DurationSeconds) > 30 {
			t.Errorf("step 0 lasted %v s in inspect: the task's lookalike (60 s) taken for Slurm's", float64(p.DurationSeconds))
		}
	}
	for _, want := range []string{"slurm.job/", "slurm.prolog/", "slurm.step/0", "slurm.step/batch", "slurm.batch_script/", "slurm.final_wait/", "slurm.epilog/", "slurm.drain/"} {
		if got[want] != 1 {
			t.Errorf("inspect's phases: %d of %s, want 1 (all: %v)", got[want], want, got)
		}
	}
	t.Logf("job %s: %d real phase spans (root %s), %d lookalikes the task sent", job, len(real), ns.Job.ID, forged)
	waitIdle(t)
}

// TestTasksCannotReadPluginSecrets: the job's own tasks run as the user
// the node's supervisor and collector run as. A task reads the
// environment of a process of its own (a control, with a marker in it),
// opens its memory and attaches to it with ptrace; it can do none of that
// to the job's supervisor or collector, which hold the plugin's token
// (what root tells reaches the files by it: a task that had it could
// forge the Slurm phases) and root's control socket's listener. A nested
// submit still takes the backend token over (TestGymAutoResumeChain),
// from the supervisor's token socket.
func TestTasksCannotReadPluginSecrets(t *testing.T) {
	waitIdle(t)
	d := markerDir(t, "plugin-secrets")
	script := writeScript(t, filepath.Base(d)+".sh", `
me=$(id -u)
GOS_MARK=control-mark sleep 60 &
ctl=$!
sleep 0.2
probe() {
	if tr '\0' '\n' 2>/dev/null </proc/$1/environ | grep -q "$3"; then echo "$2 environ readable"; else echo "$2 environ denied"; fi
	if (exec 3</proc/$1/mem) 2>/dev/null; then echo "$2 mem opened"; else echo "$2 mem denied"; fi
	if python3 -c 'import ctypes,sys; l=ctypes.CDLL(None,use_errno=True); sys.exit(0 if l.ptrace(16,int(sys.argv[1]),0,0)==0 else 1)' $1 2>/dev/null; then echo "$2 ptrace attached"; else echo "$2 ptrace denied"; fi
}
probe $ctl control GOS_MARK=control-mark
n=0
for p in $(pgrep -u $me -f 'otelcol-gym|supervise --from-env'); do
	n=$((n+1))
	case "$(tr '\0' ' ' </proc/$p/cmdline)" in *supervise*) w=supervisor ;; *) w=collector ;; esac
	probe $p $w GYM_OTEL_
done
echo "found=$n"
kill $ctl
`)
	r := asUser(t, 120*time.Second, tokenEnv(), fmt.Sprintf("sbatch --wait -w gn1 --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, script))
	out, _ := os.ReadFile(filepath.Join(d, "job.out"))
	if r.code != 0 {
		t.Fatalf("exit %d: %s\n%s", r.code, r.stderr, out)
	}
	t.Logf("the task's probes:\n%s", out)
	lines := strings.Split(string(out), "\n")
	has := func(l string) bool {
		for _, x := range lines {
			if x == l {
				return true
			}
		}
		return false
	}
	// The control shows the probes work: they would read a dumpable
	// process of the same uid.
	for _, l := range []string{"control environ readable", "control mem opened"} {
		if !has(l) {
			t.Fatalf("the control probe did not give %q: the probes prove nothing", l)
		}
	}
	ptraceWorks := has("control ptrace attached")
	if !ptraceWorks {
		t.Logf("ptrace of a process of the same uid is refused on this host (Yama): the ptrace probe proves nothing here")
	}
	if !has("found=2") {
		t.Fatalf("the task found not one supervisor and one collector of its job")
	}
	for _, w := range []string{"supervisor", "collector"} {
		for _, l := range []string{w + " environ denied", w + " mem denied"} {
			if !has(l) {
				t.Errorf("the task: not %q", l)
			}
		}
		if ptraceWorks && !has(w+" ptrace denied") {
			t.Errorf("the task attached to the job's %s with ptrace", w)
		}
	}
	waitNoCollector(t)
	waitIdle(t)
}
