package slurm

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestParseGresGPUs: the node's GPU files in slurmd's index order (global
// Name= lines first, then the node's NodeName= lines, each in file order;
// File= ranges and lists as written), and every gres.conf whose order is
// not known refused with ErrGresOrderUnknown.
func TestParseGresGPUs(t *testing.T) {
	for _, c := range []struct {
		name, conf, node string
		want             []string
		unknown          bool
	}{
		{"range", "Name=gpu File=/dev/nvidia[0-1]\n", "gn1", []string{"/dev/nvidia0", "/dev/nvidia1"}, false},
		{"range from 2, comment, Type", "# GPUs\nName=gpu Type=a100 File=/dev/nvidia[2-3] # two\n", "gn1", []string{"/dev/nvidia2", "/dev/nvidia3"}, false},
		{"list kept in its order", "Name=gpu File=/dev/nvidia3,/dev/nvidia1\n", "gn1", []string{"/dev/nvidia3", "/dev/nvidia1"}, false},
		{"NodeName filter", "NodeName=gn[1,3-4] Name=gpu File=/dev/nvidia[0-1]\nNodeName=gn2 Name=gpu File=/dev/nvidia[2-3]\n", "gn2", []string{"/dev/nvidia2", "/dev/nvidia3"}, false},
		{"NodeName filter, other node", "NodeName=gn[1,3-4] Name=gpu File=/dev/nvidia[0-1]\nNodeName=gn2 Name=gpu File=/dev/nvidia[2-3]\n", "gn3", []string{"/dev/nvidia0", "/dev/nvidia1"}, false},
		{"several lines, two types", "NodeName=gn1 Name=gpu Type=l4 File=/dev/nvidia2\nNodeName=gn1 Name=gpu Type=a100 File=/dev/nvidia0\n", "gn1", []string{"/dev/nvidia2", "/dev/nvidia0"}, false},
		// slurmd appends every Name= record before any NodeName= one.
		{"global lines first", "NodeName=gn1 Name=gpu File=/dev/nvidia1\nName=gpu File=/dev/nvidia0\n", "gn1", []string{"/dev/nvidia0", "/dev/nvidia1"}, false},
		{"other GRES skipped, keys any case", "name=mps Count=100\nNAME=GPU FILE=/dev/nvidia[4-5]\n", "gn1", []string{"/dev/nvidia4", "/dev/nvidia5"}, false},
		{"AutoDetect off", "AutoDetect=off\nName=gpu File=/dev/nvidia1\n", "gn1", []string{"/dev/nvidia1"}, false},
		{"node's AutoDetect off over the global one", "AutoDetect=nvml\nNodeName=gn1 AutoDetect=off Name=gpu File=/dev/nvidia1\n", "gn1", []string{"/dev/nvidia1"}, false},
		{"AutoDetect", "AutoDetect=nvml\nName=gpu File=/dev/nvidia[0-1]\n", "gn1", nil, true},
		{"node's AutoDetect", "NodeName=gn1 AutoDetect=nvml\n", "gn1", nil, true},
		{"other node's AutoDetect", "NodeName=gn2 AutoDetect=nvml\nName=gpu File=/dev/nvidia0\n", "gn1", []string{"/dev/nvidia0"}, false},
		{"Include", "Include /etc/slurm/gres.d/gpu.conf\n", "gn1", nil, true},
		{"gpu without File", "Name=gpu Count=2\n", "gn1", nil, true},
		{"MultipleFiles", "Name=gpu MultipleFiles=/dev/nvidia[0-1]\n", "gn1", nil, true},
		{"no line for the node", "NodeName=gn2 Name=gpu File=/dev/nvidia0\n", "gn1", nil, true},
		{"not key=value", "Name=gpu File=/dev/nvidia0 garbage\n", "gn1", nil, true},
		{"bad range", "Name=gpu File=/dev/nvidia[0-\n", "gn1", nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseGresGPUs(strings.NewReader(c.conf), c.node)
			if c.unknown {
				if !errors.Is(err, ErrGresOrderUnknown) {
					t.Fatalf("parseGresGPUs = %q, %v; want ErrGresOrderUnknown", got, err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("parseGresGPUs = %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

// TestReadGresGPUs: gres.conf beside slurm.conf; a missing file is the
// file's error.
func TestReadGresGPUs(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "slurm.conf")
	if p := GresConfPath(conf); p != filepath.Join(dir, "gres.conf") {
		t.Fatalf("GresConfPath = %q", p)
	}
	if _, err := ReadGresGPUs(GresConfPath(conf), "gn1"); !os.IsNotExist(err) {
		t.Fatalf("missing gres.conf: %v", err)
	}
	if err := os.WriteFile(GresConfPath(conf), []byte("NodeName=gn1 Name=gpu File=/dev/nvidia[2-3]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := ReadGresGPUs(GresConfPath(conf), "gn1")
	if err != nil || !reflect.DeepEqual(g.Files, []string{"/dev/nvidia2", "/dev/nvidia3"}) {
		t.Fatalf("ReadGresGPUs = %+v, %v", g, err)
	}
}

// TestDeviceMinor: a device's minor from stat (/dev/null is 1:3), a file
// that is not a device by its trailing number, else none.
func TestDeviceMinor(t *testing.T) {
	if m, by, ok := DeviceMinor("/dev/null"); !ok || m != 3 || by != MinorByStat {
		t.Errorf("DeviceMinor(/dev/null) = %d, %q, %v; want 3 by stat", m, by, ok)
	}
	if m, by, ok := DeviceMinor(filepath.Join(t.TempDir(), "nvidia12")); !ok || m != 12 || by != MinorByName {
		t.Errorf("DeviceMinor(missing nvidia12) = %d, %q, %v; want 12 by name", m, by, ok)
	}
	if _, _, ok := DeviceMinor("/dev/nvidia"); ok {
		t.Error("DeviceMinor(/dev/nvidia) found a minor")
	}
}
