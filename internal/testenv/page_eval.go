package testenv

import (
	"testing"

	"github.com/chromedp/chromedp"
)

// EvalPage loads the file path in headless Chromium (as OpenPage does),
// waits until its body's attribute data-<attr> is set (the page's scripts
// have run), and returns it. It fails the test when Chromium fails or the
// attribute is not set within 60 s; it skips like Chromium when Chromium
// is not installed.
func EvalPage(t testing.TB, path, attr string) string {
	t.Helper()
	ctx, cancel := browser(t)
	defer cancel()
	var out string
	sel := "body[data-" + attr + "]"
	err := chromedp.Run(ctx,
		chromedp.Navigate("file://"+path),
		chromedp.WaitReady(sel),
		chromedp.AttributeValue("body", "data-"+attr, &out, nil),
	)
	if err != nil {
		t.Fatalf("chromium %s: %v", path, err)
	}
	return out
}
