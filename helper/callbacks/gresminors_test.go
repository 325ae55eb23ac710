package callbacks

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sirupsen/logrus/hooks/test"
)

// TestGresMinors: the job's GRES indexes mapped through the gres.conf
// beside slurm.conf (a device's minor by stat: /dev/null is 1:3; a file
// that is not a device by its trailing number), and every case it cannot
// map logged once, with no map (the index is then read as the minor).
func TestGresMinors(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "slurm.conf")
	gres := filepath.Join(dir, "gres.conf")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(gres, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name, gres string
		indexes    []string
		want       map[string]int
		note       string
	}{
		{"by stat", "NodeName=gn2 Name=gpu File=/dev/null\n", []string{"0"}, map[string]int{"0": 3}, "minors by stat of the devices"},
		{"by name", "NodeName=gn2 Name=gpu File=" + dir + "/nvidia[6-7]\n", []string{"1", "0"}, map[string]int{"0": 6, "1": 7}, "minors by the files' trailing numbers"},
		{"AutoDetect", "AutoDetect=nvml\n", []string{"0"}, nil, "AutoDetect=nvml"},
		{"index past the files", "NodeName=gn2 Name=gpu File=" + dir + "/nvidia2\n", []string{"1"}, nil, "index 1 is not one of the node's 1 GPU files"},
		{"no gres.conf", "", []string{"0"}, nil, "no such file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			os.Remove(gres)
			if c.gres != "" {
				write(c.gres)
			}
			log, hook := test.NewNullLogger()
			got, note := gresMinors(conf, "gn2", c.indexes, 7, log)
			if !reflect.DeepEqual(got, c.want) || !strings.Contains(note, c.note) {
				t.Fatalf("gresMinors = %v, %q; want %v, a note with %q", got, note, c.want, c.note)
			}
			logged := len(hook.AllEntries())
			if (c.want == nil) != (logged == 1) || logged > 1 {
				t.Fatalf("%d log lines for %v", logged, got)
			}
		})
	}
	log, hook := test.NewNullLogger()
	if m, note := gresMinors(conf, "gn2", nil, 7, log); m != nil || note != "" || len(hook.AllEntries()) != 0 {
		t.Fatalf("no GPUs: %v, %q, %d log lines", m, note, len(hook.AllEntries()))
	}
}
