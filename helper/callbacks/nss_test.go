package callbacks

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/gym-otel-spank/gym-otel-spank/helper/record"
)

// hangNSS makes lookupAccount hang (as getpwuid_r over a dead LDAP server
// does) until the returned release is called; returned reports whether a
// hung lookup has returned.
func hangNSS(t *testing.T) (release func(), returned func() bool) {
	t.Helper()
	var done atomic.Bool
	gate := make(chan struct{})
	old := lookupAccount
	lookupAccount = func(uid uint32) (account, error) {
		<-gate
		done.Store(true)
		return account{Name: "late"}, nil
	}
	var once atomic.Bool
	release = func() {
		if once.CompareAndSwap(false, true) {
			close(gate)
		}
	}
	t.Cleanup(func() { release(); lookupAccount = old })
	return release, done.Load
}

// TestNSSLookupBounded: a lookup that never answers costs at most the
// bound: the fallback (Slurm's user name, no groups) comes back while the
// lookup is still blocked; a context that ends first ends the wait too.
func TestNSSLookupBounded(t *testing.T) {
	_, returned := hangNSS(t)
	a, err := boundedAccount(context.Background(), 2345, "alice", 200*time.Millisecond)
	if !errors.Is(err, errNSSTimeout) || a.Name != "alice" || a.Groups != nil || a.Home != "" {
		t.Fatalf("%+v %v", a, err)
	}
	if returned() {
		t.Fatal("the lookup returned: the test proves nothing")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if a, err := boundedAccount(ctx, 2345, "", time.Hour); !errors.Is(err, errNSSTimeout) || a.Name != "2345" {
		t.Fatalf("an ended context: %+v %v", a, err)
	}
	// An answer within the bound is taken as it is.
	lookupAccount = func(uid uint32) (account, error) { return account{Name: "bob", Groups: []uint32{7, 8}}, nil }
	if a, err := boundedAccount(context.Background(), 2345, "alice", time.Hour); err != nil || a.Name != "bob" || len(a.Groups) != 2 {
		t.Fatalf("a quick answer: %+v %v", a, err)
	}
}

// TestPrologNSSHangs: the whole prolog with NSS hanging. It still writes
// root's record within its deadline (here failed: the supervisor binary
// does not exist, which the prolog reaches only past the lookup), logs why
// the collector would run without supplementary groups, and the lookup is
// still blocked when it returns.
func TestPrologNSSHangs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (root's record dir)")
	}
	_, returned := hangNSS(t)
	dir := t.TempDir()
	site := filepath.Join(dir, "site.yaml")
	if err := os.WriteFile(site, []byte("otel:\n  endpoint: https://otlp.example.com\n  service_name: s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := Args{Site: site, PrologTimeout: 10, CLI: filepath.Join(dir, "no-such-cli"), RecordDir: filepath.Join(dir, "records"), Cgroup: CgroupOff}
	res, err := Submit(a, "", dir, func(k string) (string, bool) {
		if k == "OTEL_TOKEN" {
			return "t", true
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SLURMD_NODENAME": "n1", "SLURM_JOB_USER": "alice", "SLURM_JOB_NODELIST": "n1"}
	log, hook := test.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	perr := Prolog(PrologInput{Args: a, Encoded: res.Encoded, Token: "t", JobID: 77, UID: 2345, GID: 2345,
		Getenv: func(k string) string { return env[k] }}, log)
	if returned() {
		t.Fatal("the lookup returned: the test proves nothing")
	}
	if perr == nil || !strings.Contains(perr.Error(), "no-such-cli") {
		t.Fatalf("prolog: %v (want the missing supervisor binary, reached past the lookup)", perr)
	}
	rec, err := record.Read(record.JobDir(a.RecordDir, "n1", 77))
	if err != nil || rec.Status != "failed" || !strings.Contains(rec.Reason, "no-such-cli") {
		t.Fatalf("record %+v %v", rec, err)
	}
	var warned bool
	for _, e := range hook.AllEntries() {
		if strings.Contains(e.Message, "NSS did not answer about uid 2345") && strings.Contains(e.Message, "no supplementary groups") {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no warning about the hung lookup: %v", hook.AllEntries())
	}
}
