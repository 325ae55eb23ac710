package main

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/gym-otel-spank/gym-otel-spank/helper/callbacks"
	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
)

// DefaultSlurmConf is where Slurm's commands read slurm.conf when
// $SLURM_CONF does not say (Debian's and the RPMs' sysconfdir).
const DefaultSlurmConf = "/etc/slurm/slurm.conf"

// plugstackLine is the plugin's line of a plugstack.conf: where it is, the
// include chain that led there, and its parsed arguments.
type plugstackLine struct {
	// Where is "file:line"; Via the files that included it, outermost first.
	Where string
	Via   []string
	Args  callbacks.Args
}

// maxIncludeDepth bounds nested include directives.
const maxIncludeDepth = 8

// findPlugstackLine reads path as Slurm's SPANK stack does (one plugin per
// line: required|optional PLUGIN [ARGS...]; "include GLOB", relative to
// the including file's dir; # comments) and returns the gym_otel.so line
// with its arguments parsed. Errors: the file, an include loop or depth,
// the plugin listed twice or not at all, its arguments (each with file:line).
func findPlugstackLine(path string) (*plugstackLine, error) {
	var found []*plugstackLine
	var argErrs []error
	var walk func(path string, via []string, depth int) error
	walk = func(path string, via []string, depth int) error {
		if depth > maxIncludeDepth {
			return fmt.Errorf("%s: includes nested deeper than %d (a loop?): %s", path, maxIncludeDepth, strings.Join(via, " -> "))
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		n := 0
		for sc.Scan() {
			n++
			line := sc.Text()
			if i := strings.IndexByte(line, '#'); i >= 0 {
				line = line[:i]
			}
			fields := strings.Fields(line)
			if len(fields) < 2 {
				continue
			}
			switch fields[0] {
			case "include":
				pattern := fields[1]
				if !filepath.IsAbs(pattern) {
					pattern = filepath.Join(filepath.Dir(path), pattern)
				}
				matches, err := filepath.Glob(pattern)
				if err != nil {
					return fmt.Errorf("%s:%d: include %s: %w", path, n, fields[1], err)
				}
				for _, m := range matches {
					if err := walk(m, append(append([]string{}, via...), fmt.Sprintf("%s:%d", path, n)), depth+1); err != nil {
						return err
					}
				}
			case "required", "optional":
				if filepath.Base(fields[1]) != "gym_otel.so" {
					continue
				}
				where := fmt.Sprintf("%s:%d", path, n)
				a, err := callbacks.ParseArgs(fields[2:])
				if err != nil {
					for _, line := range strings.Split(err.Error(), "\n") {
						argErrs = append(argErrs, fmt.Errorf("%s: %s", where, line))
					}
				}
				found = append(found, &plugstackLine{Where: where, Via: via, Args: a})
			}
		}
		return sc.Err()
	}
	if err := walk(path, nil, 0); err != nil {
		return nil, err
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("%s: no gym_otel.so line (nor in the files it includes): sbatch would not load the plugin", path)
	case 1:
	default:
		return nil, fmt.Errorf("gym_otel.so is listed twice, at %s and %s: Slurm would load it twice", found[0].Where, found[1].Where)
	}
	return found[0], errors.Join(argErrs...)
}

// slurmPlugstack returns the plugstack.conf sbatch reads: slurm.conf's
// PlugStackConfig, else plugstack.conf beside slurm.conf ($SLURM_CONF, else
// DefaultSlurmConf), and the slurm.conf it read. fs.ErrNotExist when there
// is no slurm.conf.
func slurmPlugstack() (plugstack, slurmConf string, err error) {
	slurmConf = os.Getenv("SLURM_CONF")
	if slurmConf == "" {
		slurmConf = DefaultSlurmConf
	}
	c, err := slurm.ReadConf(slurmConf)
	if err != nil {
		return "", slurmConf, err
	}
	plugstack = filepath.Join(filepath.Dir(slurmConf), "plugstack.conf")
	if v, ok := c.Get("PlugStackConfig"); ok {
		plugstack = v
	}
	return plugstack, slurmConf, nil
}

// siteFromPlugstack fills in's site file and inline items from the
// plugin's plugstack line, as sbatch reads them: from in.plugstack, else
// (when in has no --site or --site-item) from slurm.conf's
// PlugStackConfig. It returns what it read, in words, for the layers line,
// and the errors of the plugstack line's arguments. Without a slurm.conf
// it reads nothing and says so.
func siteFromPlugstack(in *siteFlags) (said string, err error) {
	path, from := in.plugstack, "--plugstack"
	if path == "" {
		if in.site != "" || len(in.siteItems) > 0 {
			return "", nil // the site layers given on the command line
		}
		p, conf, err := slurmPlugstack()
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Sprintf("no site settings (no %s to find plugstack.conf in: give --plugstack FILE or --site FILE)", conf), nil
		}
		if err != nil {
			return "", err
		}
		path, from = p, "PlugStackConfig of "+conf
	}
	pl, err := findPlugstackLine(path)
	if pl == nil {
		return "", fmt.Errorf("%s: %w", from, err)
	}
	where := "the plugstack line " + pl.Where
	if len(pl.Via) > 0 {
		where += " (included from " + strings.Join(pl.Via, ", ") + ")"
	}
	where += ", " + from
	var parts []string
	if in.site == "" {
		in.site = pl.Args.Site
	}
	if pl.Args.Site != "" {
		parts = append(parts, "site file "+pl.Args.Site)
	}
	var items []string
	for _, it := range pl.Args.SiteItems {
		in.siteItems = append(multiFlag{it.Key + "=" + it.Value}, in.siteItems...)
		items = append(items, it.Key+"="+it.Value)
	}
	if len(items) > 0 {
		parts = append(parts, "inline items "+strings.Join(items, " "))
	}
	if len(parts) == 0 {
		parts = append(parts, "no site file and no inline items")
	}
	return strings.Join(parts, " and ") + " from " + where, err
}
