package supervise_test

// otel.delivery: files on real parts: a supervisor, the real collector
// (which writes only the files), the real test backend with bearer-token
// auth, loadgen at a high rate. The backend is stopped in the middle of a
// job for 30 s, or is down until after the job's end; afterwards the
// backend holds every item of the files, with no more duplicates than the
// receipt's bound, and replay sends exactly what the checkpoint misses.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/delivery"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// fileItems counts the items (spans, metric points, log records) of
// signal's jsonl files in dirs, and each span id's occurrences (traces).
func fileItems(t *testing.T, signal string, dirs ...string) (items int64, spans map[string]int) {
	t.Helper()
	spans = map[string]int{}
	for _, d := range dirs {
		f, err := os.Open(filepath.Join(d, jobdir.SignalFile(signal)))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReaderSize(f, 1<<20)
		for {
			line, err := r.ReadBytes('\n')
			if len(line) > 0 && line[len(line)-1] == '\n' {
				n, _, ok := jobdir.CountItems(signal, line)
				if !ok {
					t.Fatalf("%s: a line that is not OTLP-JSON", f.Name())
				}
				items += n
				if signal == "traces" {
					var doc struct {
						ResourceSpans []struct {
							ScopeSpans []struct {
								Spans []struct {
									TraceID string `json:"traceId"`
									SpanID  string `json:"spanId"`
								} `json:"spans"`
							} `json:"scopeSpans"`
						} `json:"resourceSpans"`
					}
					if err := json.Unmarshal(line, &doc); err != nil {
						t.Fatal(err)
					}
					for _, rs := range doc.ResourceSpans {
						for _, ss := range rs.ScopeSpans {
							for _, sp := range ss.Spans {
								spans[sp.TraceID+sp.SpanID]++
							}
						}
					}
				}
			}
			if err != nil {
				break
			}
		}
		f.Close()
	}
	return items, spans
}

// checkBackendHoldsFiles asserts that the backend's files (dirs: one per
// backend process) hold every item of the job's files, every span by its
// id, and at most bound items more; it returns the extra items.
func checkBackendHoldsFiles(t *testing.T, out string, bound int64, dirs ...string) (extra int64) {
	t.Helper()
	for _, sig := range []string{"traces", "metrics", "logs"} {
		want, wantSpans := fileItems(t, sig, out)
		got, gotSpans := fileItems(t, sig, dirs...)
		t.Logf("%s: the files hold %d items, the backend %d", sig, want, got)
		if got < want {
			t.Errorf("%s: the backend holds %d items, fewer than the files' %d", sig, got, want)
		}
		extra += got - want
		if sig != "traces" {
			continue
		}
		missing := 0
		for id := range wantSpans {
			if gotSpans[id] == 0 {
				missing++
			}
		}
		if missing > 0 {
			t.Errorf("traces: %d of the files' %d spans are not at the backend", missing, len(wantSpans))
		}
	}
	if extra > bound {
		t.Errorf("the backend holds %d items more than the files: more than the receipt's duplicates bound %d", extra, bound)
	}
	return extra
}

// fileJob starts a supervisor with otel.delivery: files against endpoint,
// sends rate spans/s for dur with loadgen (during calls at its start, in
// a goroutine), drains and returns the supervisor, the receipt and the
// supervisor's peak RSS (KiB).
func fileJob(t *testing.T, endpoint, token string, rate int, dur time.Duration, during func(start time.Time)) (*harness.Sup, *receipt.Receipt, int64, time.Duration) {
	t.Helper()
	s, rc, peak, _, drain := fileJobPeaks(t, endpoint, token, rate, dur, during)
	return s, rc, peak, drain
}

// fileJobPeaks is fileJob, also returning the collector's peak RSS (KiB).
func fileJobPeaks(t *testing.T, endpoint, token string, rate int, dur time.Duration, during func(start time.Time)) (*harness.Sup, *receipt.Receipt, int64, int64, time.Duration) {
	t.Helper()
	return fileJobOf(t, harness.Job{JobID: "3838", Endpoint: endpoint, Token: token, Site: "  delivery: files\n  delivery_rate_cap: 20000\n"}, rate, dur, during)
}

// fileJobOf is fileJobPeaks for the job j (its Site has delivery: files).
func fileJobOf(t *testing.T, j harness.Job, rate int, dur time.Duration, during func(start time.Time)) (*harness.Sup, *receipt.Receipt, int64, int64, time.Duration) {
	t.Helper()
	token := j.Token
	lg := loadgenBin(t)
	s := harness.StartSup(t, j).MustReady(t)
	if strings.Contains(string(mustRead(t, filepath.Join(s.Out, jobdir.ConfigFile))), "otlp_http/backend") {
		t.Fatal("collector.yaml has a backend exporter with otel.delivery: files")
	}
	checkCollectorToken(t, s.Report.CollectorPID, token, false)
	var peak, collPeak int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if rss, _, ok := memOf(s.Cmd.Process.Pid); ok {
				peak = max(peak, rss)
			}
			if rss, _, ok := memOf(s.Report.CollectorPID); ok {
				collPeak = max(collPeak, rss)
			}
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	env := []string{
		"PATH=/usr/bin:/bin",
		fmt.Sprintf("OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:%d", s.Report.Ports.OTLPHTTP),
		"OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20" + s.ReceiverToken,
	}
	start := time.Now()
	if during != nil {
		wg.Add(1)
		go func() { defer wg.Done(); during(start) }()
	}
	p := harness.StartProc(t, "loadgen", env, lg, "--steps", fmt.Sprintf("%d:%s", rate, dur), "--pause", "0s",
		"--tag", "files", "--workers", "4", "--batch", "200", "--out", filepath.Join(s.Dir, "loadgen.json"))
	p.Wait(t, dur+90*time.Second)
	drain, err := s.Drain(t, 3*time.Minute)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("drain: %v\n%s", err, s.Output())
	}
	rc, err := receipt.Read(s.Out)
	if err != nil {
		t.Fatalf("%v\n%s", err, s.Output())
	}
	if rc.Delivery == nil {
		t.Fatalf("the receipt has no delivery section\n%s", s.Output())
	}
	for _, l := range rc.Summary() {
		t.Log(l)
	}
	return s, rc, peak, collPeak, drain
}

// checkCollectorToken asserts that the running collector pid has the
// backend token (OTEL_TOKEN, escaped as the supervisor passes it) in its
// environment when want is true (otel.delivery: collector: its exporter
// sends), and neither the variable nor the token's value when want is
// false (delivery from the files: the supervisor sends).
func checkCollectorToken(t *testing.T, pid int, token string, want bool) {
	t.Helper()
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatalf("the collector's environment: %v", err)
	}
	escaped := strings.ReplaceAll(token, "$", "$$")
	has := strings.Contains("\x00"+string(env), "\x00OTEL_TOKEN="+escaped+"\x00")
	if want && !has {
		t.Errorf("the collector %d has not the backend token in OTEL_TOKEN (delivery: collector)", pid)
	}
	if !want && (strings.Contains("\x00"+string(env), "\x00OTEL_TOKEN=") || strings.Contains(string(env), escaped)) {
		t.Errorf("the collector %d has the backend token in its environment with delivery from the files", pid)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFileDeliveryOutageMidJob: the backend is stopped 10 s into a 60 s
// job at 5,000 spans/s and started again 30 s later on the same port; the
// supervisor catches up from the files by itself, before the job's end,
// and the receipt says so with the lag.
func TestFileDeliveryOutageMidJob(t *testing.T) {
	token := "files-" + harness.RandHex(6)
	port := harness.FreePort(t)
	be1 := harness.StartBackendOn(t, token, port)
	var be2 *harness.Backend
	var outageEnd time.Time
	began := time.Now()
	s, rc, peak, drain := fileJob(t, be1.URL, token, 5000, 60*time.Second, func(start time.Time) {
		time.Sleep(time.Until(start.Add(10 * time.Second)))
		be1.Stop(t)
		time.Sleep(30 * time.Second)
		be2 = harness.StartBackendOn(t, token, port)
		outageEnd = time.Now()
	})
	d := rc.Delivery
	if !d.Complete() {
		t.Fatalf("the backend's copy is not complete at the drain: %+v\n%s", d, s.Output())
	}
	if len(d.CatchUps) == 0 || d.CatchUps[0].CaughtUp.IsZero() {
		t.Fatalf("the receipt has no caught-up outage: %+v", d.CatchUps)
	}
	c := d.CatchUps[0]
	catchUp := c.CaughtUp.Sub(outageEnd)
	t.Logf("outage from %s, backend back at %s, answered %s, caught up %s: catch-up %v after the backend's return, lag %v, %d items late; supervisor peak RSS %d MiB; drain %v; whole test %v",
		c.From.Format("15:04:05.000"), outageEnd.Format("15:04:05.000"), c.Answered.Format("15:04:05.000"), c.CaughtUp.Format("15:04:05.000"),
		catchUp.Round(time.Millisecond), c.Lag().Round(time.Millisecond), c.Items, peak>>10, drain.Round(time.Millisecond), time.Since(began).Round(time.Second))
	if c.Items < 10000 {
		t.Errorf("only %d items counted as caught up after a 30 s outage at 5,000 spans/s", c.Items)
	}
	if c.Lag() < 29*time.Second || catchUp > 90*time.Second {
		t.Errorf("lag %v (want at least the outage), catch-up %v after the backend's return", c.Lag(), catchUp)
	}
	be2.Stop(t)
	extra := checkBackendHoldsFiles(t, s.Out, d.DuplicatesBound, be1.Dir, be2.Dir)
	t.Logf("duplicates at the backend: %d (receipt's bound %d)", extra, d.DuplicatesBound)
	if peak > 100<<10 {
		t.Errorf("the supervisor's peak RSS %d MiB: more than 100 MiB", peak>>10)
	}
}

// TestFileDeliveryBackendDownPastEnd: the backend is down for the whole
// job and its drain; the receipt says the backend's copy is incomplete and
// how many items replay sends; replay, once the backend is up, sends
// exactly those, a second replay sends nothing (exit 0), and --all warns
// how many the backend already had.
func TestFileDeliveryBackendDownPastEnd(t *testing.T) {
	token := "files-" + harness.RandHex(6)
	port := harness.FreePort(t)
	endpoint := fmt.Sprintf("http://127.0.0.1:%d", port)
	began := time.Now()
	s, rc, _, drain := fileJob(t, endpoint, token, 5000, 15*time.Second, nil)
	d := rc.Delivery
	want := int64(0)
	for _, sig := range []string{"traces", "metrics", "logs"} {
		n, _ := fileItems(t, sig, s.Out)
		want += n
	}
	bl, err := delivery.Backlogs(s.Out)
	if err != nil {
		t.Fatal(err)
	}
	var left int64
	for _, b := range bl {
		left += b.Items
	}
	t.Logf("files %d items; receipt: backlog %d, accepted %d; checkpoint's backlog %d; drain %v", want, d.Backlog, d.Accepted, left, drain.Round(time.Millisecond))
	if d.Complete() || d.Backlog != want || d.Accepted != 0 || left != want {
		t.Fatalf("with the backend down the receipt should say every item (%d) is past the checkpoint: %+v", want, d)
	}
	if !strings.Contains(strings.Join(rc.Summary(), "\n"), fmt.Sprintf("backend copy INCOMPLETE: %d items", want)) {
		t.Errorf("the receipt's summary does not say the backend's copy is incomplete:\n%s", strings.Join(rc.Summary(), "\n"))
	}
	be := harness.StartBackendOn(t, token, port)
	replay := func(args ...string) (string, error) {
		cmd := exec.Command(harness.CLI(t), append(append([]string{"replay", "--endpoint", endpoint, "--token-env", "OTEL_TOKEN"}, args...), s.Out)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "OTEL_TOKEN=" + token}
		out, err := cmd.CombinedOutput()
		t.Logf("replay %s:\n%s", strings.Join(args, " "), out)
		return string(out), err
	}
	out, err := replay()
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if !strings.Contains(out, fmt.Sprintf("sending %d items", want)) || !strings.Contains(out, fmt.Sprintf("accepted %d items", want)) {
		t.Errorf("replay did not say it sends and the backend accepted exactly the %d missing items", want)
	}
	out, err = replay()
	if err != nil || !strings.Contains(out, "nothing to send") {
		t.Errorf("a second replay: %v, want nothing to send and exit 0", err)
	}
	be.Stop(t)
	extra := checkBackendHoldsFiles(t, s.Out, 0, be.Dir)
	if extra != 0 {
		t.Errorf("the backend holds %d items more than the files after replay", extra)
	}
	be = harness.StartBackendOn(t, token, port)
	out, err = replay("--all", "--binary", testenv.Collector(t))
	if err != nil {
		t.Errorf("replay --all: %v", err)
	}
	m := regexp.MustCompile(`already acknowledged (\d+) of these items`).FindStringSubmatch(out)
	if m == nil || m[1] != strconv.FormatInt(want, 10) {
		t.Errorf("replay --all does not warn that the backend already had %d items", want)
	}
	be.Stop(t)
	t.Logf("whole test %v", time.Since(began).Round(time.Second))
}

// TestMeasureFileDeliveryOutage measures delivery from the files through
// one long outage (GYM_OTEL_MEASURE=fileoutage; `make bench` row P10): a
// job at GYM_OTEL_MEASURE_RATE spans/s (default 2,000) whose backend is
// stopped 10 s in for GYM_OTEL_MEASURE_OUTAGE_SECONDS (default 600) and
// started again on the same port; the job runs on for a fifth of the
// outage and 30 s more. It prints a testenv.FileOutageSummary line: the
// backend's items after the job against the files', the catch-up time
// after the backend's return, the duplicates against the receipt's bound,
// and the peak memory of the supervisor and the collector.
//
//	GYM_OTEL_MEASURE=fileoutage GYM_OTEL_MEASURE_OUTAGE_SECONDS=600 go test -run TestMeasureFileDeliveryOutage -v -timeout 60m ./helper/supervise
func TestMeasureFileDeliveryOutage(t *testing.T) {
	if os.Getenv("GYM_OTEL_MEASURE") != "fileoutage" {
		t.Skip("set GYM_OTEL_MEASURE=fileoutage to measure")
	}
	outage, rate := 600, 2000
	if v := os.Getenv("GYM_OTEL_MEASURE_OUTAGE_SECONDS"); v != "" {
		outage, _ = strconv.Atoi(v)
	}
	if v := os.Getenv("GYM_OTEL_MEASURE_RATE"); v != "" {
		rate, _ = strconv.Atoi(v)
	}
	if outage < 1 || rate < 1 {
		t.Fatalf("GYM_OTEL_MEASURE_OUTAGE_SECONDS %d, GYM_OTEL_MEASURE_RATE %d: want positive numbers", outage, rate)
	}
	dur := 10*time.Second + time.Duration(outage)*time.Second*6/5 + 30*time.Second
	token := "fout-" + harness.RandHex(6)
	port := harness.FreePort(t)
	be1 := harness.StartBackendOn(t, token, port)
	var be2 *harness.Backend
	var back time.Time
	s, rc, peak, collPeak, drain := fileJobPeaks(t, be1.URL, token, rate, dur, func(start time.Time) {
		time.Sleep(time.Until(start.Add(10 * time.Second)))
		be1.Stop(t)
		time.Sleep(time.Duration(outage) * time.Second)
		be2 = harness.StartBackendOn(t, token, port)
		back = time.Now()
	})
	d := rc.Delivery
	sum := testenv.FileOutageSummary{Rate: rate, OutageSeconds: outage, JobSeconds: int(dur / time.Second), DuplicatesBound: d.DuplicatesBound,
		Complete: d.Complete(), CatchUp: -1, PeakSupervisor: float64(peak) / 1024, PeakCollector: float64(collPeak) / 1024,
		MemoryLimit: config.Defaults().MemoryLimitMiB, Drain: drain.Seconds()}
	if len(d.CatchUps) > 0 {
		c := d.CatchUps[0]
		sum.LateItems, sum.Lag = c.Items, c.Lag().Seconds()
		if !c.CaughtUp.IsZero() && !back.IsZero() {
			sum.CatchUp = c.CaughtUp.Sub(back).Seconds()
		}
	}
	be2.Stop(t)
	for _, sig := range []string{"traces", "metrics", "logs"} {
		want, wantSpans := fileItems(t, sig, s.Out)
		got, gotSpans := fileItems(t, sig, be1.Dir, be2.Dir)
		sum.Files += want
		sum.Backend += got
		for id := range wantSpans {
			if gotSpans[id] == 0 {
				sum.Missing++
			}
		}
	}
	sum.Extra = sum.Backend - sum.Files
	fmt.Println(sum.Line())
	t.Log(sum.Line())
	if sum.Missing > 0 || sum.Backend < sum.Files || sum.Extra > sum.DuplicatesBound || !sum.Complete {
		t.Errorf("the backend's copy after the job: %+v", sum)
	}
}

// TestFileDeliveryReplayRefusedWhileDelivering: while the supervisor
// delivers the files from the checkpoint it holds the node dir's delivery
// lock, and a `replay` of the dir refuses (exit non-zero, nothing sent),
// naming the node and --while-delivering; after the drain the lock is
// free and a replay finds nothing to send.
func TestFileDeliveryReplayRefusedWhileDelivering(t *testing.T) {
	t.Parallel()
	token := "lock-" + harness.RandHex(6)
	be := harness.StartBackend(t, token)
	s := harness.StartSup(t, harness.Job{JobID: "3839", Endpoint: be.URL, Token: token, Site: "  delivery: files\n"}).MustReady(t)
	checkCollectorToken(t, s.Report.CollectorPID, token, false)
	replay := func() (string, error) {
		cmd := exec.Command(harness.CLI(t), "replay", "--endpoint", be.URL, "--token-env", "OTEL_TOKEN", s.Out)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "OTEL_TOKEN=" + token}
		out, err := cmd.CombinedOutput()
		t.Logf("replay (%v):\n%s", err, out)
		return string(out), err
	}
	harness.WaitFor(t, 30*time.Second, "the first delivery", func() bool {
		_, err := os.Stat(filepath.Join(s.Out, delivery.LockFile))
		return err == nil
	})
	out, err := replay()
	if err == nil || !strings.Contains(out, "the job's first node") || !strings.Contains(out, "--while-delivering") || strings.Contains(out, "sending ") {
		t.Errorf("a replay while the supervisor delivers: %v, want a refusal naming the node and --while-delivering, nothing sent", err)
	}
	if _, err := s.Drain(t, 2*time.Minute); err != nil {
		t.Fatalf("drain: %v\n%s", err, s.Output())
	}
	out, err = replay()
	if err != nil || !strings.Contains(out, "nothing to send") {
		t.Errorf("a replay after the drain: %v, want nothing to send", err)
	}
}
