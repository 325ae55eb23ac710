package main

import "testing"

// TestParseExchanges reads the phase exchanges of one step out of an
// strace -f -tt -T log: start and end, connect to close, other sockets
// and other pids ignored.
func TestParseExchanges(t *testing.T) {
	log := `17049 04:47:50.054869 connect(9, {sa_family=AF_UNIX, sun_path="/run/gym-otel/gn1/7/hold/sock"}, 110) = 0 <0.000055>
17050 04:47:50.055000 connect(9, {sa_family=AF_UNIX, sun_path=@"other"}, 8) = 0 <0.000055>
17049 04:47:50.057382 sendto(9, "step start 0 1796186870054\n", 27, MSG_NOSIGNAL, NULL, 0) = 27 <0.000088>
17050 04:47:50.057400 close(9) = 0 <0.000010>
17049 04:47:50.058869 close(9)          = 0 <0.000044>
17049 04:47:50.248000 connect(9, {sa_family=AF_UNIX, sun_path="/run/gym-otel/gn1/7/hold/sock"}, 110) = 0 <0.000055>
17049 04:47:50.248551 sendto(9, "step end 0 1796186870054 1796186"..., 61, MSG_NOSIGNAL, NULL, 0) = 61 <0.000045>
17049 04:47:50.250500 close(9)          = 0 <0.000044>
`
	ex := parseExchanges(log)
	if len(ex["start"]) != 1 || len(ex["end"]) != 1 || len(ex) != 2 {
		t.Fatalf("exchanges %v, want one start and one end", ex)
	}
	if d := ex["start"][0]; d < 3.999 || d > 4.001 {
		t.Errorf("start %v ms, want 4", d)
	}
	if d := ex["end"][0]; d < 2.499 || d > 2.501 {
		t.Errorf("end %v ms, want 2.5", d)
	}
}
