package config

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// enrootShell is the program Enroot starts every container through
// (ENROOT_LOGIN_SHELL, default "/bin/sh": the container's /etc/rc runs in
// it), so an image without it cannot start under Enroot.
const enrootShell = "/bin/sh"

// CheckEnrootImage refuses an otel.container that Enroot cannot start,
// where that is known before the job runs: with an otel.container_runtime
// whose program is enroot, an image that names the upstream collector
// image (distroless: no shell), or an image given as a directory on this
// host (a root file system) without /bin/sh. An image given otherwise (a
// squashfs file, a container created with `enroot create`, a path this
// host does not see) is the runtime's to refuse at the start. The error
// names otel.container and the image.
func CheckEnrootImage(runtime, image string) error {
	f := strings.Fields(runtime)
	// `env VAR=... enroot ...`: the program after env's assignments.
	for len(f) > 0 && (path.Base(f[0]) == "env" || strings.Contains(f[0], "=")) {
		f = f[1:]
	}
	if len(f) == 0 || path.Base(f[0]) != "enroot" {
		return nil
	}
	const why = "the upstream collector image is distroless and cannot start under enroot: use an image that has a shell"
	if strings.Contains(image, "opentelemetry-collector") {
		return fmt.Errorf("otel.container: %q: %s (Enroot starts every container through %s)", image, why, enrootShell)
	}
	if !filepath.IsAbs(image) {
		return nil
	}
	fi, err := os.Stat(image)
	if err != nil || !fi.IsDir() {
		return nil
	}
	if !existsIn(image, enrootShell) {
		return fmt.Errorf("otel.container: %q has no %s: %s", image, enrootShell, why)
	}
	return nil
}

// existsIn reports whether p exists inside the root file system root, its
// symbolic links resolved inside root (an absolute link target is root's,
// not this host's), at most 16 of them.
func existsIn(root, p string) bool {
	parts := strings.Split(strings.Trim(path.Clean(p), "/"), "/")
	cur := "/"
	for links := 0; len(parts) > 0; {
		next := path.Join(cur, parts[0])
		parts = parts[1:]
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil {
			return false
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > 16 {
			return false
		}
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return false
		}
		if !path.IsAbs(target) {
			target = path.Join(cur, target)
		}
		parts = append(strings.Split(strings.Trim(path.Clean(target), "/"), "/"), parts...)
		cur = "/"
	}
	return true
}
