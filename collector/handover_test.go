package main

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

// message is a hand-over message as the supervisor writes it
// (helper/supervise's handoverMessage), for the parser's tests.
func message(umask uint32, limits []rlimit, env ...string) []byte {
	var b bytes.Buffer
	b.Write(handoverMagic[:])
	binary.Write(&b, binary.LittleEndian, umask)
	binary.Write(&b, binary.LittleEndian, uint32(len(limits)))
	binary.Write(&b, binary.LittleEndian, limits)
	for _, kv := range env {
		b.WriteString(kv + "\x00")
	}
	return b.Bytes()
}

// TestParseHandover: a message's umask, limits and environment (values
// with "=" and newlines kept whole); a cut or foreign message is refused
// with what is wrong.
func TestParseHandover(t *testing.T) {
	limits := []rlimit{{Res: 4, Cur: 0, Max: 0}, {Res: 7, Cur: 1024, Max: 4096}}
	h, err := parseHandover(message(0o077, limits, "A=1", "CFG=x: y\nz: a=b", "EMPTY="))
	if err != nil {
		t.Fatal(err)
	}
	if h.umask != 0o077 || len(h.limits) != 2 || h.limits[1] != limits[1] {
		t.Errorf("umask %o, limits %v", h.umask, h.limits)
	}
	if strings.Join(h.env, "|") != "A=1|CFG=x: y\nz: a=b|EMPTY=" {
		t.Errorf("env %q", h.env)
	}
	good := message(0o077, limits, "A=1")
	for _, c := range []struct {
		name string
		msg  []byte
		says string
	}{
		{"foreign", append([]byte("GOSHO\x00\x00\x02"), good[8:]...), "not a hand-over message"},
		{"cut header", good[:10], "header is cut short"},
		{"cut limits", good[:8+4+4+10], "limits are cut short"},
		{"no end", good[:len(good)-1], "has no end"},
		{"no name", message(0, nil, "=x"), "not NAME=value"},
		{"too many limits", message(0, make([]rlimit, 65)), "header is cut short"},
	} {
		if _, err := parseHandover(c.msg); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %q", c.name, err, c.says)
		}
	}
}

// TestParseMemLimit: GOMEMLIMIT as the runtime reads it.
func TestParseMemLimit(t *testing.T) {
	for v, want := range map[string]int64{"384MiB": 384 << 20, "1GiB": 1 << 30, "4096": 4096, "10KiB": 10 << 10, "7B": 7, "off": 1<<63 - 1} {
		if got, err := parseMemLimit(v); err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", v, got, err, want)
		}
	}
	for _, v := range []string{"", "MiB", "-1MiB", "1.5GiB", "9999999999TiB", "12 MiB"} {
		if _, err := parseMemLimit(v); err == nil {
			t.Errorf("%q: no error", v)
		}
	}
}
