package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenPageSeesFaults: the browser check sees what it must refuse: a
// console error, an exception, a network request, a CSP violation, and
// tells a drawn canvas from a blank one.
func TestOpenPageSeesFaults(t *testing.T) {
	Chromium(t)
	dir := t.TempDir()
	page := filepath.Join(dir, "p.html")
	os.WriteFile(page, []byte(`<!DOCTYPE html><html><head>
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; img-src http://127.0.0.1:9">
</head><body>
<canvas id="drawn" width="100" height="100"></canvas><canvas id="blank" width="100" height="100"></canvas>
<img src="http://127.0.0.1:9/x.png"><img src="http://127.0.0.2:9/csp.png">
<script>
const g = document.getElementById('drawn').getContext('2d'); g.fillRect(0, 0, 50, 50);
console.error('boom');
fetch('data:text/plain,x');
document.body.dataset.charts = '2';
setTimeout(() => { throw new Error('late'); }, 0);
</script></body></html>`), 0o644)
	p := OpenPage(t, page, filepath.Join(dir, "p.png"))
	all := strings.Join(p.Console, "\n")
	for _, want := range []string{"boom", "late", "csp.png"} {
		if !strings.Contains(all, want) {
			t.Errorf("console %q lacks %q", all, want)
		}
	}
	if len(p.Requests) == 0 || !strings.Contains(strings.Join(p.Requests, " "), "127.0.0.1:9/x.png") {
		t.Errorf("requests %v: the image request not seen", p.Requests)
	}
	if p.Canvases["drawn"] != 2500 || p.Canvases["blank"] != 0 || p.Charts != "2" {
		t.Errorf("canvases %v charts %q", p.Canvases, p.Charts)
	}
}
