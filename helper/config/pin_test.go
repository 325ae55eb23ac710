package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const pinSite = `otel:
  endpoint: https://otlp.example.com
  service_name: svc
  binary: /usr/bin/otelcol-gym
pinned: [binary, endpoint, container, memory_limit_mib]
`

func TestPinnedKeysWinAtSubmit(t *testing.T) {
	dir := t.TempDir()
	site := writeFile(t, dir, "site.yaml", pinSite)
	gym := writeFile(t, dir, "gym.yaml", `otel:
  binary: /home/u/evil
  endpoint: https://otlp.example.com
  service_name: mine
driver:
  gym_install: /x
`)
	r, err := Resolve(Inputs{SiteFile: site, Spec: "config=" + gym + ",container=evil:latest,memory_limit_mib=4096", WorkDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if r.Otel.Binary != "/usr/bin/otelcol-gym" || r.Otel.Container != "" || r.Otel.MemoryLimitMiB != 512 {
		t.Fatalf("pinned keys not the site's: %+v", r.Otel)
	}
	if r.Otel.ServiceName != "mine" {
		t.Fatalf("an unpinned key lost the user's value: %q", r.Otel.ServiceName)
	}
	warns, err := r.Validate(func(string) (string, bool) { return "t", true })
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(warns, "\n")
	for _, want := range []string{
		`otel.binary is pinned by the site to "/usr/bin/otelcol-gym": the value "/home/u/evil" (config ` + gym + `:2) is not used`,
		`otel.container is pinned by the site to null: the value "evil:latest" (--gym-otel) is not used`,
		`otel.memory_limit_mib is pinned by the site to 512: the value 4096 (--gym-otel) is not used`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("missing notice %q in:\n%s", want, all)
		}
	}
	if strings.Contains(all, "otel.endpoint is pinned") {
		t.Errorf("an equal value of a pinned key got a notice:\n%s", all)
	}
}

func TestPinnedListErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ text, want string }{
		{"pinned: [binray]\n", `pinned[0]: "binray" is not an otel key (did you mean "binary"?)`},
		{"pinned: binary\n", "pinned: expected a list of otel keys"},
	} {
		_, err := LoadSite(writeFile(t, dir, "s.yaml", c.text))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.text, err, c.want)
		}
	}
}

func TestEnforcePinsOnAForgedSpec(t *testing.T) {
	dir := t.TempDir()
	site := writeFile(t, dir, "site.yaml", pinSite)
	forged := &Resolved{Version: EncodedVersion, Otel: Defaults()}
	forged.Otel.Binary, forged.Otel.Container, forged.Otel.Endpoint = "/tmp/x", "img", "https://otlp.example.com"
	lines, err := EnforcePins(forged, site, []Item{{Key: "container_runtime", Value: "apptainer run {image}"}})
	if err != nil {
		t.Fatal(err)
	}
	if forged.Otel.Binary != "/usr/bin/otelcol-gym" || forged.Otel.Container != "" {
		t.Fatalf("the node's pins were not applied: %+v", forged.Otel)
	}
	if len(lines) != 2 || !strings.Contains(lines[0], `otel.binary: the job's value "/tmp/x" is not this node's pinned "/usr/bin/otelcol-gym"`) {
		t.Fatalf("lines: %q", lines)
	}
	if _, err := EnforcePins(forged, filepath.Join(dir, "missing.yaml"), nil); err == nil {
		t.Fatal("an unreadable site file must be an error on the node (the pins cannot be known)")
	}
}
