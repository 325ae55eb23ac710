package replay

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
)

// ForeignError is Run's refusal of a directory the caller does not own
// without both --endpoint and --token-env.
type ForeignError struct {
	// Path is the first replayed path not owned by the caller; Owner its
	// owner's uid and Name that user's name ("" when unknown); Uid the
	// caller's.
	Path       string
	Owner, Uid uint32
	Name       string
}

func (e *ForeignError) Error() string {
	who := fmt.Sprintf("uid %d", e.Owner)
	if e.Name != "" {
		who = fmt.Sprintf("%s (uid %d)", e.Name, e.Owner)
	}
	return fmt.Sprintf("%s is owned by %s, not by you (uid %d): a directory someone else wrote is replayed only with both --endpoint URL and --token-env NAME, so that your token goes only where you say", e.Path, who, e.Uid)
}

// checkOwner returns a *ForeignError for the first of paths (not followed
// when a symbolic link) that uid does not own; paths that do not exist
// are skipped.
func checkOwner(paths []string, uid int) error {
	for _, p := range paths {
		st, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		owner := st.Sys().(*syscall.Stat_t).Uid
		if int64(owner) != int64(uid) {
			e := &ForeignError{Path: p, Owner: owner, Uid: uint32(uid)}
			if u, err := user.LookupId(strconv.FormatUint(uint64(owner), 10)); err == nil {
				e.Name = u.Username
			}
			return e
		}
	}
	return nil
}

func filePaths(files []File) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.source()
	}
	return out
}

// target is the endpoint (normalized) and the token's variable of a
// replay: opt's, else the site's settings (opt.Site, opt.SiteItems).
// Errors name the flag or the file.
func target(opt Options) (endpoint, tokenEnv string, err error) {
	endpoint, tokenEnv = opt.Endpoint, opt.TokenEnv
	name := "--endpoint"
	if endpoint == "" || tokenEnv == "" {
		if opt.Site == "" && len(opt.SiteItems) == 0 {
			return "", "", errors.New("--site: no site settings to take the endpoint and the token's variable from: give --site FILE (or --plugstack FILE), or --endpoint URL and --token-env NAME")
		}
		from := "the site file " + opt.Site
		if opt.Site == "" {
			from = "the site's inline items"
		}
		o, _, err := config.SiteOtel(opt.Site, opt.SiteItems)
		if err != nil {
			return "", "", fmt.Errorf("%w (or give --endpoint URL and --token-env NAME)", err)
		}
		if endpoint == "" {
			if o.Endpoint == "" {
				return "", "", fmt.Errorf("--endpoint: %s sets no otel.endpoint: give --endpoint URL", from)
			}
			endpoint, name = o.Endpoint, "otel.endpoint of "+from
		}
		if tokenEnv == "" {
			tokenEnv = o.TokenEnv
		}
	}
	if err := CheckEndpoint(name, endpoint); err != nil {
		return "", "", err
	}
	ep, _, err := config.NormalizeEndpoint(endpoint)
	if err != nil {
		return "", "", fmt.Errorf("%s %q: %v", name, endpoint, err)
	}
	if !tokenEnvRE().MatchString(tokenEnv) {
		return "", "", fmt.Errorf("--token-env %q: not a variable name (letters, digits, _)", tokenEnv)
	}
	return ep, tokenEnv, nil
}
