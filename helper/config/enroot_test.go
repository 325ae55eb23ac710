package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEnrootImageRefused: the seed's constraint (the upstream collector
// image is distroless and cannot start under Enroot, which starts every
// container through /bin/sh) is refused before the job where it can be
// known: the upstream image by name, a root file system dir without
// /bin/sh (links resolved inside the image, as in a merged-/usr one). Other
// runtimes, and images this host cannot look into, pass.
func TestEnrootImageRefused(t *testing.T) {
	const enroot = "env ENROOT_RUNTIME_PATH={rundir}/run enroot start --env={envname} --mount {output}:{output} {image} /otelcol-gym --config {config}"
	bare := t.TempDir() // a distroless-like root: the collector only
	if err := os.WriteFile(filepath.Join(bare, "otelcol-gym"), []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	merged := t.TempDir() // /bin -> /usr/bin (absolute, the image's), /usr/bin/sh -> dash
	for _, d := range []string{"usr/bin"} {
		os.MkdirAll(filepath.Join(merged, d), 0o755)
	}
	os.WriteFile(filepath.Join(merged, "usr/bin/dash"), []byte("x"), 0o755)
	os.Symlink("dash", filepath.Join(merged, "usr/bin/sh"))
	os.Symlink("/usr/bin", filepath.Join(merged, "bin"))
	dangling := t.TempDir() // /bin/sh -> /nowhere inside the image, though the host has /bin
	os.MkdirAll(filepath.Join(dangling, "bin"), 0o755)
	os.Symlink("/nowhere/sh", filepath.Join(dangling, "bin/sh"))
	sqsh := filepath.Join(t.TempDir(), "otelcol.sqsh")
	os.WriteFile(sqsh, []byte("hsqs"), 0o644)

	for _, c := range []struct {
		runtime, image string
		want           []string // nil: accepted
	}{
		{enroot, bare, []string{"otel.container", bare, "no /bin/sh", "distroless", "image that has a shell"}},
		{enroot, dangling, []string{"otel.container", dangling, "no /bin/sh"}},
		{enroot, "docker://otel/opentelemetry-collector-contrib:0.161.0", []string{"otel.container", "distroless", "cannot start under enroot"}},
		{"enroot start {image}", "otel/opentelemetry-collector-k8s", []string{"distroless"}},
		{enroot, merged, nil},
		{enroot, sqsh, nil},
		{enroot, "otelcol", nil}, // a container made with `enroot create`
		{enroot, "/not/on/this/host", nil},
		{DefaultContainerRuntime, bare, nil}, // not Enroot: the seed names Enroot's constraint
		{"podman run --rm {image}", "docker://otel/opentelemetry-collector-contrib", nil},
	} {
		err := CheckEnrootImage(c.runtime, c.image)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s with %q: %v, want accepted", c.image, c.runtime, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s with %q: accepted, want refused", c.image, c.runtime)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", c.image, err, w)
			}
		}
	}

	// Through Validate, as submit, the prolog and supervise call it.
	r, err := Resolve(Inputs{SiteFile: "testdata/site.yaml", WorkDir: mustAbs(t, "."), Spec: "container=" + bare})
	if err != nil {
		t.Fatal(err)
	}
	r.Otel.ContainerRuntime = enroot
	if _, err := r.Validate(nil); err == nil || !strings.Contains(err.Error(), "no /bin/sh") {
		t.Errorf("Validate: %v, want the image refused", err)
	}
}
