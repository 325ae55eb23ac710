package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseSpec checks that any SPEC either parses or fails with a message
// that names "--gym-otel", and that parsed items survive FormatSpec.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{"", "off", "on", "(null)", "config=/a,run_id=x", `run_id=a\,b`, "gym_span_groups=a+b",
		"node_metrics_port=null", "gym_span_groups=default,verify", `a=\`, "=,=", "k=v=w", "endpoint=https://x/v1/traces"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sp, err := ParseSpec(s)
		if err != nil {
			if !strings.Contains(err.Error(), "--gym-otel") {
				t.Fatalf("error without the flag's name: %v", err)
			}
			return
		}
		if _, err := ParseInline("--gym-otel", sp.Otel); err != nil && !strings.Contains(err.Error(), "otel.") && !strings.Contains(err.Error(), "--gym-otel") {
			t.Fatalf("inline error without the key: %v", err)
		}
		items, err := SplitItems(FormatSpec(sp.Otel))
		if len(sp.Otel) > 0 && (err != nil || len(items) != len(sp.Otel)) {
			t.Fatalf("round trip of %q: %v %v", s, items, err)
		}
	})
}

// FuzzLoadYAML checks that any site file or Gym config either loads or fails
// with an error, never a panic, and that errors about the otel block name
// otel.<key> or the file.
func FuzzLoadYAML(f *testing.F) {
	for _, s := range []string{"otel:\n  endpoint: https://x\n", "otel: [1]\n", "otel:\n  node_metrics_port: 9100.5\n",
		"services:\n  a: {port: 1, nodes: [0, x]}\ncompute: {c: 1}\n", "otel:\n  a: &x 1\n  b: *x\n", "- 1\n", ":\n", "otel:\n  enabled: !!bool yes\n"} {
		f.Add(s)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, s string) {
		p := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadSiteFile(p); err != nil && !strings.Contains(err.Error(), p) {
			t.Fatalf("site file error without the file: %v", err)
		}
		if g, err := LoadGymConfig(p); err == nil && g == nil {
			t.Fatal("nil config without error")
		}
	})
}
