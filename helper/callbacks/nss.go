package callbacks

import (
	"context"
	"errors"
	"fmt"
	"os/user"
	"strconv"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
)

// NSSBound bounds the prolog's lookup of the job's user (name, home and
// supplementary groups) in NSS: over LDAP or sssd a lookup can hang, and a
// blocked getpwuid_r or getgrouplist cannot be cancelled. The ids
// themselves come from SPANK (S_JOB_UID, S_JOB_GID) and need no lookup.
const NSSBound = 5 * time.Second

// account is what the prolog takes from NSS for the job's user.
type account struct {
	// Name is the user name (Facts.User, USER, LOGNAME).
	Name string
	// Home is the home directory ("" when unknown: HOME is then not set).
	Home string
	// Groups are the supplementary group ids, the primary among them; nil
	// when unknown: the supervisor then runs with the primary group only.
	Groups []uint32
}

// lookupAccount is the NSS lookup of uid (a variable: tests inject a slow
// one).
var lookupAccount = func(uid uint32) (account, error) {
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return account{}, fmt.Errorf("the job's user (uid %d): %w", uid, err)
	}
	groups, err := proc.SupplementaryGroups(u)
	if err != nil {
		return account{}, fmt.Errorf("the groups of %s: %w", u.Username, err)
	}
	return account{Name: u.Username, Home: u.HomeDir, Groups: groups}, nil
}

// errNSSTimeout: NSS did not answer within the bound.
var errNSSTimeout = errors.New("NSS did not answer")

// boundedAccount runs lookupAccount(uid) in a goroutine and waits for it at
// most until bound or ctx's end. Past that it returns errNSSTimeout and the
// fallback: the name Slurm gave (SLURM_JOB_USER, else the uid as text), no
// home and no supplementary groups. The blocked lookup is left behind: it
// ends with the prolog's process, which exits when the prolog returns. An
// answer within the bound is returned as it is, errors included.
func boundedAccount(ctx context.Context, uid uint32, slurmUser string, bound time.Duration) (account, error) {
	ch := make(chan struct {
		a   account
		err error
	}, 1) // buffered: a late answer does not block its goroutine
	go func() {
		a, err := lookupAccount(uid)
		ch <- struct {
			a   account
			err error
		}{a, err}
	}()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.a, r.err
	case <-t.C:
	case <-ctx.Done():
	}
	name := slurmUser
	if name == "" {
		name = strconv.FormatUint(uint64(uid), 10)
	}
	return account{Name: name}, fmt.Errorf("%w about uid %d within %s", errNSSTimeout, uid, bound)
}
