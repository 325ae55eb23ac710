package proc

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseLimits(t *testing.T) {
	text := `Limit                     Soft Limit           Hard Limit           Units     
Max cpu time              unlimited            unlimited            seconds   
Max stack size            8388608              unlimited            bytes     
Max core file size        0                    unlimited            bytes     
Max open files            1024                 524288               files     
Max locked memory         8388608              8388608              bytes     
Max nice priority         0                    0                    
`
	m, err := ParseLimits(text)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]unix.Rlimit{
		unix.RLIMIT_CPU:     {Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY},
		unix.RLIMIT_STACK:   {Cur: 8388608, Max: unix.RLIM_INFINITY},
		unix.RLIMIT_CORE:    {Cur: 0, Max: unix.RLIM_INFINITY},
		unix.RLIMIT_NOFILE:  {Cur: 1024, Max: 524288},
		unix.RLIMIT_MEMLOCK: {Cur: 8388608, Max: 8388608},
		unix.RLIMIT_NICE:    {},
	}
	if len(m) != len(want) {
		t.Fatalf("got %d rows: %+v", len(m), m)
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("resource %d: %+v, want %+v", k, m[k], v)
		}
	}
	if _, err := ParseLimits("Max open files            lots                 1 files\n"); err == nil {
		t.Error("a bad number must be an error")
	}
}
