package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// PodmanImage makes the collector's image (a shell, the C library, the
// collector, and the mount points rootless Podman binds over, since a
// lower layer of root's cannot be written from the user's namespace),
// imports it as tag with `podman import` (no registry) into a new image
// store under dir, made readable by all as a site keeps one for rootless
// jobs (--storage-opt additionalimagestore=), and saves it as an OCI
// archive too; it returns the store's and the archive's paths.
func PodmanImage(t testing.TB, podman, dir, tag string) (store, archive string) {
	t.Helper()
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"bin", "lib64", "lib/x86_64-linux-gnu", "etc", "proc", "sys", "dev", "run", "tmp"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(rootfs, "tmp"), 0o1777)
	cp := func(src, dst string, mode os.FileMode) {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(rootfs, dst), data, mode); err != nil {
			t.Fatal(err)
		}
	}
	cp("/bin/dash", "bin/sh", 0o755)
	cp("/lib/x86_64-linux-gnu/libc.so.6", "lib/x86_64-linux-gnu/libc.so.6", 0o755)
	cp("/lib64/ld-linux-x86-64.so.2", "lib64/ld-linux-x86-64.so.2", 0o755)
	cp(Collector(t), "otelcol-gym", 0o755)
	for _, f := range []string{"etc/hosts", "etc/resolv.conf", "etc/hostname", "etc/passwd", "etc/group", "run/.containerenv"} {
		if err := os.WriteFile(filepath.Join(rootfs, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/proc/mounts", filepath.Join(rootfs, "etc/mtab")); err != nil {
		t.Fatal(err)
	}
	tar := filepath.Join(dir, "image.tar")
	if out, err := exec.Command("tar", "-C", rootfs, "--owner=0", "--group=0", "-cf", tar, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, out)
	}
	store = filepath.Join(dir, "images")
	start := time.Now()
	if out, err := exec.Command(podman, "--root", store, "--runroot", filepath.Join(dir, "images-run"), "--storage-driver=overlay",
		"--events-backend=none", "import", tar, tag).CombinedOutput(); err != nil {
		t.Fatalf("podman import: %v %s", err, out)
	}
	t.Logf("image imported in %v", time.Since(start))
	archive = filepath.Join(dir, "image.oci.tar")
	if out, err := exec.Command(podman, "--root", store, "--runroot", filepath.Join(dir, "images-run"), "--storage-driver=overlay",
		"--events-backend=none", "save", "--format", "oci-archive", "-o", archive, tag).CombinedOutput(); err != nil {
		t.Fatalf("podman save: %v %s", err, out)
	}
	if out, err := exec.Command("chmod", "-R", "a+rX", store, archive).CombinedOutput(); err != nil {
		t.Fatalf("chmod: %v %s", err, out)
	}
	return store, archive
}

// PodmanRuntime is the otel.container_runtime line of the tests (and of the
// admin guide) for rootless Podman: per-job state in {rundir}, no cgroup of
// its own, the node's network, the collector's variables by name, a tmpfs
// on tmpfsTop (the job dirs' top dir, where the bind's mount point is made)
// and {output} bound at its path. With a store (PodmanImage), {image} is a
// tag read from it; with store "", {image} is an archive
// ("oci-archive:<path>") that each job loads into its own storage.
func PodmanRuntime(podman, runc, store, tmpfsTop string) string {
	opts, pull := "", ""
	if store != "" {
		opts, pull = " --storage-opt additionalimagestore="+store, " --pull=never"
	}
	return "env XDG_RUNTIME_DIR={rundir} HOME={rundir} " + podman +
		" --root {rundir}/storage --runroot {rundir}/run --storage-driver=overlay" + opts +
		" --cgroup-manager=cgroupfs --events-backend=none --runtime " + runc +
		" run --rm" + pull + " --network=host --env={envname} --tmpfs " + tmpfsTop + " --volume {output}:{output} {image} /otelcol-gym --config {config}"
}
