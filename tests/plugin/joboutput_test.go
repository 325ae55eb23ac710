package plugin_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// telemetryLine is the batch step's first line in the job's output
// (spank/notice.c): the job, the files' dir, the nodes, the backend.
var telemetryLine = regexp.MustCompile(`(?m)^gym-otel: job (\d+)(?: \((\d+_\d+)\))?'s telemetry: files under (/\S+) \(nodes? (\S+)\), shipped to (\S+)$`)

// readLine is the line after it: the one command that reads the files.
var readLine = regexp.MustCompile(`(?m)^gym-otel: read it: gym-otel-spank inspect (\S+) \(complete once the job has ended\)$`)

// TestJobOutputNamesTelemetry: a 2-node --gym-otel job with two srun
// -N2 steps has, at the start of its output file, exactly one telemetry
// line and one "read it" line (the batch step's task_init; not the srun
// steps', not the second node's), naming the job, its nodes as Slurm's
// hostlist, the backend without its token, and a dir that exists and
// holds the job's files, which the named command reads. Each element of
// an array job has its own, once; a job without --gym-otel has no
// gym-otel line at all; a bad job_output value fails the submit, naming
// it; with the plugstack's job_output=off a --gym-otel job (its
// collector running as before) has none.
func TestJobOutputNamesTelemetry(t *testing.T) {
	waitIdle(t)
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	out := filepath.Join(jobsDir, "jobout-"+tag)
	script := writeScript(t, "jobout-"+tag+".sh", `echo script-start
srun -N2 --ntasks-per-node=1 bash -c 'echo step1 $SLURM_PROCID >&2'
srun -N2 --ntasks-per-node=1 bash -c 'echo step2 $SLURM_PROCID >&2'
echo script-end
`)
	jobDir := filepath.Join(jobsDir, "otel-jobout-"+tag)
	r := asUser(t, 120*time.Second, tokenEnv(), fmt.Sprintf("sbatch -N2 --wait --gym-otel=job_dir=%s -o %s.out %s", jobDir, out, script))
	data, _ := os.ReadFile(out + ".out")
	if r.code != 0 {
		t.Fatalf("sbatch --wait: exit %d; stderr %s; job output:\n%s", r.code, r.stderr, data)
	}
	id := jobIDOf(t, r)
	text := string(data)
	t.Logf("job %s's output:\n%s", id, text)
	if n := strings.Count(text, "gym-otel: "); n != 2 {
		t.Errorf("%d gym-otel lines in the job's output, want 2 (the telemetry line and the read-it line, once)", n)
	}
	for _, step := range []string{"step1 1", "step2 1", "script-end"} {
		if !strings.Contains(text, step) {
			t.Errorf("the job's output lacks %q: were the steps run?", step)
		}
	}
	if strings.Contains(text, backendToken) || strings.Contains(text, "Authorization") || strings.Contains(text, "Bearer") {
		t.Errorf("the job's output names the token or a header")
	}
	m := telemetryLine.FindAllStringSubmatch(text, -1)
	rd := readLine.FindAllStringSubmatch(text, -1)
	if len(m) != 1 || len(rd) != 1 {
		t.Fatalf("telemetry lines %d, read-it lines %d in the job's output, want 1 each", len(m), len(rd))
	}
	if first := strings.SplitN(text, "\n", 3); len(first) < 3 || !strings.HasPrefix(first[0], "gym-otel: job ") ||
		!strings.HasPrefix(first[1], "gym-otel: read it: ") || !strings.HasPrefix(first[2], "script-start") {
		t.Errorf("the two lines do not open the job's output, before the script's first line")
	}
	dir, nodes, backend := m[0][3], m[0][4], m[0][5]
	if m[0][1] != id || m[0][2] != "" {
		t.Errorf("the line names job %q (%q), want %s", m[0][1], m[0][2], id)
	}
	if nodes != "gn[1-2]" {
		t.Errorf("nodes %q, want gn[1-2]", nodes)
	}
	if want := "http://127.0.0.1:" + backendPort; backend != want {
		t.Errorf("backend %q, want %q", backend, want)
	}
	if want := filepath.Join(jobDir, "otel"); dir != want || rd[0][1] != want {
		t.Errorf("dir %q, inspect %q; want %q", dir, rd[0][1], want)
	}
	waitNoCollector(t)
	waitIdle(t)
	for _, f := range []string{"collector.yaml", "receipt.json", "metrics.jsonl", "nodes/gn2/metrics.jsonl", "nodes/gn2/receipt.json"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("the named dir holds no %s: %v", f, err)
		}
	}
	// The command the line names reads the job, as the user.
	ins := asUser(t, 60*time.Second, nil, filepath.Join(plugDir, "gym-otel-spank")+" inspect "+rd[0][1])
	if ins.code != 0 || !strings.Contains(ins.stdout, "gn2") {
		t.Errorf("gym-otel-spank inspect %s: exit %d, gn2 named: %v; stderr %s", rd[0][1], ins.code, strings.Contains(ins.stdout, "gn2"), ins.stderr)
	}

	t.Run("array elements once each", func(t *testing.T) {
		arrDir := filepath.Join(jobsDir, "otel-joboutarr-"+tag+"-%A_%a")
		r := asUser(t, 120*time.Second, tokenEnv(), fmt.Sprintf("sbatch -N1 --array=0-1 --wait --gym-otel=job_dir=%s -o %s.arr-%%a.out %s", arrDir, out, script))
		if r.code != 0 {
			t.Fatalf("sbatch --array: exit %d %s", r.code, r.stderr)
		}
		arrID := jobIDOf(t, r)
		for _, a := range []string{"0", "1"} {
			data, _ := os.ReadFile(out + ".arr-" + a + ".out")
			m := telemetryLine.FindAllStringSubmatch(string(data), -1)
			if len(m) != 1 || strings.Count(string(data), "gym-otel: ") != 2 {
				t.Errorf("element %s: %d telemetry lines, %d gym-otel lines (want 1, 2):\n%s", a, len(m), strings.Count(string(data), "gym-otel: "), data)
				continue
			}
			if m[0][2] != arrID+"_"+a || m[0][4] != "gn1" && m[0][4] != "gn2" {
				t.Errorf("element %s: names %q on %q, want %s_%s on one node", a, m[0][2], m[0][4], arrID, a)
			}
			if want := filepath.Join(jobsDir, "otel-joboutarr-"+tag+"-"+arrID+"_"+a, "otel"); m[0][3] != want {
				t.Errorf("element %s: dir %q, want %q", a, m[0][3], want)
			}
		}
		waitNoCollector(t)
		waitIdle(t)
	})

	t.Run("without --gym-otel", func(t *testing.T) {
		r := asUser(t, 120*time.Second, tokenEnv(), fmt.Sprintf("sbatch -N2 --wait -o %s.noflag.out %s", out, script))
		data, _ := os.ReadFile(out + ".noflag.out")
		if r.code != 0 || !strings.Contains(string(data), "script-end") {
			t.Fatalf("sbatch: exit %d %s; output:\n%s", r.code, r.stderr, data)
		}
		if strings.Contains(string(data), "gym-otel") {
			t.Errorf("a job without --gym-otel has a gym-otel line:\n%s", data)
		}
		waitIdle(t)
	})

	t.Run("bad job_output value", func(t *testing.T) {
		withSnippet(t, strings.TrimSpace(goodConf)+" job_output=no\n")
		r := asUser(t, 30*time.Second, tokenEnv(), "sbatch --gym-otel "+script)
		if r.code == 0 || !strings.Contains(r.stderr, `plugstack.conf argument "job_output=no": job_output wants on or off`) {
			t.Fatalf("code %d, stderr %s", r.code, r.stderr)
		}
		if q, _ := run("squeue", "-h"); strings.TrimSpace(q) != "" {
			t.Fatalf("something was queued: %s", q)
		}
	})

	t.Run("job_output=off", func(t *testing.T) {
		offConf := filepath.Join(os.TempDir(), "gym-otel"+instance+"-joboutput.conf")
		if err := os.WriteFile(offConf, []byte(strings.TrimSuffix(goodConf, "\n")+" job_output=off\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		old := clusterConf
		clusterConf = offConf
		err := upCluster()
		clusterConf = old
		t.Cleanup(func() {
			_ = os.Remove(offConf)
			if err := upCluster(); err != nil {
				t.Error(err)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		waitIdle(t)
		offDir := filepath.Join(jobsDir, "otel-joboutoff-"+tag)
		r := asUser(t, 120*time.Second, tokenEnv(), fmt.Sprintf("sbatch -N2 --wait --gym-otel=job_dir=%s -o %s.off.out %s", offDir, out, script))
		data, _ := os.ReadFile(out + ".off.out")
		if r.code != 0 || !strings.Contains(string(data), "script-end") {
			t.Fatalf("sbatch: exit %d %s; output:\n%s", r.code, r.stderr, data)
		}
		if strings.Contains(string(data), "gym-otel") {
			t.Errorf("job_output=off: the job's output has a gym-otel line:\n%s", data)
		}
		waitNoCollector(t)
		waitIdle(t)
		// The collector ran as before: only the line is off.
		for _, f := range []string{"otel/metrics.jsonl", "otel/nodes/gn2/metrics.jsonl"} {
			if _, err := os.Stat(filepath.Join(offDir, f)); err != nil {
				t.Errorf("job_output=off: %v", err)
			}
		}
	})
}
