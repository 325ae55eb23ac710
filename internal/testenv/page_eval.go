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

// EvalPageJS loads the file path in headless Chromium as EvalPage does,
// waits for the body's attribute data-<attr> (the page's scripts have
// run), then evaluates the JavaScript expression expr in the page and
// returns its value, which must be a string (JSON.stringify(...)). It
// fails the test when Chromium fails, the attribute is not set within
// 60 s or expr throws; it skips like Chromium when Chromium is not
// installed.
func EvalPageJS(t testing.TB, path, attr, expr string) string {
	t.Helper()
	ctx, cancel := browser(t)
	defer cancel()
	var out string
	err := chromedp.Run(ctx,
		chromedp.Navigate("file://"+path),
		chromedp.WaitReady("body[data-"+attr+"]"),
		chromedp.Evaluate(expr, &out),
	)
	if err != nil {
		t.Fatalf("chromium %s: %v", path, err)
	}
	return out
}
