package render_test

import (
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
)

// TestEscape: every "$" is doubled for the collector, which undoes it when
// it expands a literal or "Bearer ${env:X}" (lifecycle's TestFullJob and
// TestTokensArriveIntact check the real round trip); Unescape undoes it.
func TestEscape(t *testing.T) {
	for in, want := range map[string]string{"abc": "abc", "a$b": "a$$b", "${env:HOME}": "$${env:HOME}", "$$": "$$$$"} {
		if got := render.Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
		if back := render.Unescape(want); back != in {
			t.Errorf("Unescape(%q) = %q, want %q", want, back, in)
		}
	}
	if got := render.Bearer("T"); got != "Bearer ${env:T}" {
		t.Errorf("Bearer(T) = %q", got)
	}
	if got := render.FileExporter("logs"); got != "file/logs" {
		t.Errorf("FileExporter(logs) = %q", got)
	}
}
