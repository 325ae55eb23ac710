package plugin

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// procStat is what the plugin needs from /proc/<pid>/stat and status.
type procStat struct {
	State     byte
	Session   int
	StartTime uint64 // clock ticks since boot (field 22)
	UID       uint32 // real uid
}

// readProc reads /proc/<pid>/stat and the real uid from /proc/<pid>/status.
func readProc(pid int) (procStat, error) {
	var ps procStat
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ps, err
	}
	// comm (field 2) may hold spaces and parentheses: split after the last ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ps, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 20 {
		return ps, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	ps.State = f[0][0]
	ps.Session, _ = strconv.Atoi(f[3])                   // field 6
	ps.StartTime, err = strconv.ParseUint(f[19], 10, 64) // field 22
	if err != nil {
		return ps, err
	}
	st, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ps, err
	}
	defer st.Close()
	sc := bufio.NewScanner(st)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
			if fs := strings.Fields(rest); len(fs) > 0 {
				u, err := strconv.ParseUint(fs[0], 10, 32)
				if err != nil {
					return ps, err
				}
				ps.UID = uint32(u)
			}
			return ps, nil
		}
	}
	return ps, fmt.Errorf("/proc/%d/status: no Uid line", pid)
}

// sessionMembers returns the pids of live processes of session sid owned by uid.
func sessionMembers(sid int, uid uint32) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ps, err := readProc(pid)
		if err != nil || ps.State == 'Z' {
			continue
		}
		if ps.Session == sid && ps.UID == uid {
			out = append(out, pid)
		}
	}
	return out
}
