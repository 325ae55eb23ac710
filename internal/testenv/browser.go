package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Page is what a real headless Chromium saw of a page.
type Page struct {
	// Console holds console messages of type error and assert, uncaught
	// exceptions, and the browser's log entries of level warning or error
	// (Content-Security-Policy violations, failed loads).
	Console []string
	// Requests are the URLs of every network request other than the page
	// itself and data: URLs.
	Requests []string
	// Canvases maps each canvas id to the number of its non-transparent
	// pixels (read with getImageData in the page).
	Canvases map[string]int
	// Charts is the page body's data-charts attribute.
	Charts string
}

// Chromium returns the path of Debian's chromium, or skips the test (fails
// it under GYM_OTEL_REQUIRE_REAL=1) when it is not installed.
func Chromium(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	Missing(t, "chromium (Debian package chromium)")
	return ""
}

// browser starts headless Chromium (no sandbox: the tests run as root) and
// returns a context of one tab, bounded at 60 s, and the function that
// stops it all. It skips the test where Chromium is not installed.
func browser(t testing.TB) (context.Context, context.CancelFunc) {
	t.Helper()
	bin := Chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.Flag("no-first-run", true), chromedp.WindowSize(1400, 1000))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel2 := chromedp.NewContext(actx)
	ctx, cancel3 := context.WithTimeout(ctx, 60*time.Second)
	return ctx, func() { cancel3(); cancel2(); cancel() }
}

// OpenPage loads the file path in headless Chromium (no sandbox: the tests
// run as root), waits until it has loaded, then reads its console errors,
// network requests and canvas pixels, and writes a full-page PNG
// screenshot to screenshot.
func OpenPage(t testing.TB, path, screenshot string) Page {
	t.Helper()
	ctx, cancel := browser(t)
	defer cancel()

	var mu sync.Mutex
	page := Page{Canvases: map[string]int{}}
	url := "file://" + path
	chromedp.ListenTarget(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.APITypeError || e.Type == runtime.APITypeAssert {
				var parts []string
				for _, a := range e.Args {
					parts = append(parts, string(a.Value)+a.Description)
				}
				page.Console = append(page.Console, string(e.Type)+": "+strings.Join(parts, " "))
			}
		case *runtime.EventExceptionThrown:
			page.Console = append(page.Console, "exception: "+e.ExceptionDetails.Text+" "+exceptionText(e.ExceptionDetails))
		case *cdplog.EventEntryAdded: // CSP violations, failed loads, interventions
			if e.Entry.Level == cdplog.LevelError || e.Entry.Level == cdplog.LevelWarning {
				page.Console = append(page.Console, fmt.Sprintf("log %s %s: %s %s", e.Entry.Level, e.Entry.Source, e.Entry.Text, e.Entry.URL))
			}
		case *network.EventRequestWillBeSent:
			if u := e.Request.URL; u != url && !strings.HasPrefix(u, "data:") {
				page.Requests = append(page.Requests, u)
			}
		}
	})
	var pixels map[string]int
	var charts string
	var png []byte
	err := chromedp.Run(ctx,
		network.Enable(),
		runtime.Enable(),
		cdplog.Enable(),
		chromedp.Navigate(url),
		chromedp.WaitReady("body"),
		chromedp.Sleep(500*time.Millisecond),
		chromedp.Evaluate(`(() => { const out = {}; document.querySelectorAll('canvas').forEach(c => {
			const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0;
			for (let i = 3; i < d.length; i += 4) if (d[i] !== 0) n++; out[c.id] = n; }); return out; })()`, &pixels),
		chromedp.Evaluate(`document.body.dataset.charts || ''`, &charts),
		chromedp.FullScreenshot(&png, 100),
	)
	if err != nil {
		t.Fatalf("chromium %s: %v", url, err)
	}
	if err := os.WriteFile(screenshot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	page.Canvases, page.Charts = pixels, charts
	return page
}

func exceptionText(d *runtime.ExceptionDetails) string {
	if d.Exception != nil {
		return d.Exception.Description
	}
	return fmt.Sprintf("line %d", d.LineNumber)
}

// CheckPage opens path in headless Chromium (OpenPage) and fails the test
// on a console error or exception, on any network request, when a canvas
// in wantCanvases is missing or blank, or when the page drew fewer charts
// (its body's data-charts) than it has canvases. The screenshot is kept at
// screenshot.
func CheckPage(t testing.TB, path, screenshot string, wantCanvases ...string) Page {
	t.Helper()
	p := OpenPage(t, path, screenshot)
	for _, c := range p.Console {
		t.Errorf("%s: console: %s", path, c)
	}
	for _, u := range p.Requests {
		t.Errorf("%s: network request to %s", path, u)
	}
	for _, id := range wantCanvases {
		if n, ok := p.Canvases[id]; !ok {
			t.Errorf("%s: no canvas %s (canvases: %v)", path, id, p.Canvases)
		} else if n < 500 {
			t.Errorf("%s: canvas %s has %d drawn pixels: blank", path, id, n)
		}
	}
	if fmt.Sprint(len(p.Canvases)) != p.Charts {
		t.Errorf("%s: %d canvases, %q charts drawn", path, len(p.Canvases), p.Charts)
	}
	t.Logf("%s: %d charts drawn (%v), screenshot %s", path, len(p.Canvases), p.Canvases, screenshot)
	return p
}

// Artifacts returns build/test-artifacts/<test name> under the repository
// (created, emptied first): files a test keeps for a person to look at.
func Artifacts(t testing.TB) string {
	t.Helper()
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	dir := filepath.Join(Root(), "build", "test-artifacts", name)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
