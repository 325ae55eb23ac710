package launch

import (
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
)

// TestParseTCP: the listening rows at 127.0.0.1 and every address are
// kept with their inode and uid; a connected row and another address are not.
func TestParseTCP(t *testing.T) {
	text := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111 1 0 100 0 0 10 0
   1: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 222 1 0 100 0 0 10 0
   2: 0100007F:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 333 1 0 20 4 30 10 -1
   3: 0A000001:0051 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 444 1 0 100 0 0 10 0
`
	rows, err := proc.ParseTCP(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	m := loopbackListeners(rows)
	if len(m) != 2 || len(m[8080]) != 1 || m[8080][0] != (Listener{111, 1000}) || m[80][0] != (Listener{222, 0}) {
		t.Fatalf("%v", m)
	}
}
