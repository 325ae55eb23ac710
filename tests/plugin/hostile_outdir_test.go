package plugin_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
)

// evilConfig is the attacker's collector configuration: loaded by a
// victim's collector, it writes the backend token (OTEL_TOKEN, the site's
// token_env) into the attacker's dir with the collector's own log lines.
// The jobs ask delivery=collector, the one delivery whose collector holds
// the backend token (under files it holds the receiver token only), so
// that a loaded configuration would have the token to write.
func evilConfig(attacker string) string {
	return fmt.Sprintf(`receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:0
exporters:
  file:
    path: %[1]s/leak.jsonl
service:
  telemetry:
    metrics:
      level: none
    logs:
      output_paths: [%[1]s/leak.log]
      initial_fields:
        stolen: ${env:OTEL_TOKEN}
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
`, attacker)
}

// TestHostileOutputDirSwap: another local user (nobody) who can write the
// job dir (mode 0777, the job's user's: a group-writable project dir
// without the sticky bit) races each job's supervisor for its output dir
// (tests/standins dirswap-standin): it renames every real otel away the
// moment it appears and puts a link to its own dir in its place, removes
// the link after a few milliseconds so that the next try makes a real dir
// again, and replaces any collector.yaml the job writes into its dir with
// one that writes the backend token out. Three jobs start under the race.
// Each job is refused (a link found at the open, or its otel renamed
// away or replaced between its making and its opening: each refusal says
// whoever can write its parent could have done it) or its files land in
// the real dir its supervisor made, wherever that was renamed to; the
// attacker's dir never gets a file of the job's user, its configuration
// is never loaded, and the token is nowhere in it. A fourth job whose
// predictable job dir the attacker made first (a scratch space) is refused:
// the job dir is another user's.
func TestHostileOutputDirSwap(t *testing.T) {
	waitIdle(t)
	swapper := filepath.Join(root, "build", "standins", "dirswap-standin")
	if _, err := os.Stat(swapper); err != nil {
		t.Fatalf("%v: run make standins", err)
	}
	u, err := user.Lookup(kit.User)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	base := markerDir(t, "swap")
	attacker := filepath.Join(base, "attacker")
	if err := os.Mkdir(attacker, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(attacker, 0o777)
	os.Chown(attacker, 65534, 65534)
	evil := filepath.Join(base, "evil.yaml")
	if err := os.WriteFile(evil, []byte(evilConfig(attacker)), 0o644); err != nil {
		t.Fatal(err)
	}
	script := writeScript(t, filepath.Base(base)+".sh", "sleep 3\necho done\n")

	// race runs one job with job_dir job while the swapper plays nobody.
	race := func(name, job string) (jobID, out, counts string) {
		stop := filepath.Join(base, name+".stop")
		var sout bytes.Buffer
		sw := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", swapper, job, attacker, evil, stop)
		sw.Stdout, sw.Stderr = &sout, &sout
		if err := sw.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { sw.Wait(); close(done) }()
		t.Cleanup(func() {
			select {
			case <-done:
			default:
				sw.Process.Kill()
				<-done
			}
		})
		time.Sleep(200 * time.Millisecond) // the loop is running
		outFile := filepath.Join(base, name+".out")
		r := asUser(t, 120*time.Second, tokenEnv(), fmt.Sprintf("sbatch --wait --gym-otel=job_dir=%s,delivery=collector -o %s %s", job, outFile, script))
		os.WriteFile(stop, nil, 0o644)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the swapper did not stop", name)
		}
		id := jobIDOf(t, r)
		// sbatch --wait returns while the job is still COMPLETING (its
		// epilog and the drain that writes the receipt): look once the
		// job has left the queue.
		waitJobsGone(t, 120*time.Second, []string{id})
		o, _ := os.ReadFile(outFile)
		return id, r.stderr + string(o), strings.TrimSpace(sout.String())
	}

	var swaps, links int
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("job%d", i)
		job := filepath.Join(base, name)
		if err := os.Mkdir(job, 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(job, 0o777)
		os.Chown(job, uid, gid)
		id, out, counts := race(name, job)
		var s, l, p int
		fmt.Sscanf(counts, "swaps=%d links=%d planted=%d", &s, &l, &p)
		swaps, links = swaps+s, links+l
		// The real dirs: otel when it is one, and the ones renamed away.
		var real []string
		if fi, err := os.Lstat(filepath.Join(job, jobdir.Otel)); err == nil && fi.IsDir() {
			real = append(real, filepath.Join(job, jobdir.Otel))
		}
		stolen, _ := filepath.Glob(filepath.Join(job, ".stolen-*"))
		real = append(real, stolen...)
		held := ""
		for _, d := range real {
			if _, err := os.Stat(filepath.Join(d, "receipt.json")); err == nil {
				if held != "" {
					t.Errorf("job %s: receipts in %s and %s", id, held, d)
				}
				held = d
			}
		}
		if held != "" {
			lines := jsonlLines(t, held)
			t.Logf("job %s: %s; held dir %s (%d dirs renamed away): %v", id, counts, held, len(stolen), lines)
			if lines["metrics.jsonl"] == 0 {
				t.Errorf("job %s: no metrics in its held dir %s", id, held)
			}
			if st, err := jobdir.ReadState(held); err != nil || st.Status != jobdir.StatusDrained {
				t.Errorf("job %s: state.json in %s: %+v %v", id, held, st, err)
			}
		} else {
			t.Logf("job %s: %s; refused: %s", id, counts, firstMatch(out, "output dir"))
			if !strings.Contains(out, "owned by") && !strings.Contains(out, "whoever can write its parent could have") {
				t.Errorf("job %s has no receipt and no refusal that says why:\n%s", id, out)
			}
		}
	}
	if swaps+links == 0 {
		t.Fatal("the swapper never swapped a dir nor put a link: the race was not run")
	}

	// The attacker made its predictable job dir first.
	pre := filepath.Join(base, "job-predicted")
	if err := os.Mkdir(pre, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(pre, 0o777)
	os.Chown(pre, 65534, 65534)
	id, out, counts := race("job-predicted", pre)
	t.Logf("job %s (job dir made by nobody): %s; %s", id, counts, firstMatch(out, "output dir"))
	if !strings.Contains(out, "is owned by nobody (uid 65534)") {
		t.Errorf("job %s in nobody's job dir was not refused as such:\n%s", id, out)
	}
	ents, _ := os.ReadDir(pre)
	for _, e := range ents {
		if fi, err := os.Lstat(filepath.Join(pre, e.Name())); err == nil && int(fi.Sys().(*syscall.Stat_t).Uid) == uid {
			t.Errorf("job %s made %s in nobody's job dir", id, e.Name())
		}
	}

	// Nothing of any job reached the attacker's dir.
	filepath.WalkDir(attacker, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == attacker {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return nil
		}
		if owner := fi.Sys().(*syscall.Stat_t).Uid; owner != 65534 {
			t.Errorf("the attacker's dir got %s of uid %d", p, owner)
		}
		switch filepath.Base(p) {
		case "collector.yaml":
			t.Errorf("a job wrote its configuration into the attacker's dir (replaced by the attacker's)")
		case "leak.log", "leak.jsonl":
			t.Errorf("a job's collector loaded the attacker's configuration: %s", p)
		}
		if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(backendToken)) {
			t.Errorf("the backend token reached the attacker's dir: %s", p)
		}
		return nil
	})
	waitNoCollector(t)
	waitIdle(t)
}

// firstMatch is the first line of text that holds sub ("" when none).
func firstMatch(text, sub string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}
