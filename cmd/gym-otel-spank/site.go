package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
)

// siteFlags are the flags that say where the site's settings are: the one
// lookup of every command that reads them (validate, render, directive,
// replay), so that each finds them as sbatch does.
type siteFlags struct {
	site      string
	siteItems multiFlag
	plugstack string
}

func (f *siteFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.site, "site", "", "site `FILE` (YAML with an otel: block), as plugstack.conf's site= (default: the plugin's plugstack line's)")
	fs.Var(&f.siteItems, "site-item", "inline site otel `KEY=VALUE` as in plugstack.conf (repeatable)")
	fs.StringVar(&f.plugstack, "plugstack", "", "read the plugin's site file and inline items from its line in this plugstack.conf `FILE` (following include), as sbatch does (default: slurm.conf's PlugStackConfig, $SLURM_CONF else "+DefaultSlurmConf+", unless --site or --site-item is given)")
}

// siteLayers are the site's settings a command found: the site file, the
// inline items (the plugstack line's, then --site-item's), and the words
// of the "checked:" line that say where they came from.
type siteLayers struct {
	// File is the site file ("" for none); Items the inline items.
	File  string
	Items []config.Item
	// Said names where the site layers came from, for the checked: line.
	Said string
	// Unread: no plugstack line could be read (the lookup's error says
	// why), so there are no site layers to go on with.
	Unread bool
}

// lookup finds the site's settings: --plugstack's line, else --site and
// --site-item as given, else the plugin's line in slurm.conf's
// PlugStackConfig ($SLURM_CONF, else DefaultSlurmConf). Without a
// slurm.conf there are none, and Said says so. The error holds the
// plugstack line's problems (its arguments, each with file:line), or says
// why no plugstack line could be read; the layers found are returned with
// it. Bad --site-item values are usage errors.
func (f *siteFlags) lookup() (siteLayers, error) {
	said, err := siteFromPlugstack(f)
	if said == "" && err != nil {
		return siteLayers{Unread: true}, err
	}
	var items []config.Item
	for _, kv := range f.siteItems {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return siteLayers{Unread: true}, usageError{fmt.Sprintf("--site-item %q: expected KEY=VALUE", kv)}
		}
		items = append(items, config.Item{Key: k, Value: v})
	}
	if said == "" {
		said = f.flagsSaid()
	}
	return siteLayers{File: f.site, Items: items, Said: said}, err
}

// flagsSaid names the site layers given by --site and --site-item ("" for
// none).
func (f *siteFlags) flagsSaid() string {
	var p []string
	if f.site != "" {
		p = append(p, "site file "+f.site+" (--site)")
	}
	if len(f.siteItems) > 0 {
		p = append(p, "inline items "+strings.Join(f.siteItems, " ")+" (--site-item)")
	}
	return strings.Join(p, " and ")
}

// checkedLine is the "checked:" line's text: the site layers, then the
// job's own (Gym config, SPEC) when given; spec "-" leaves out the SPEC
// (replay reads none).
func checkedLine(site siteLayers, gymConfig, spec string) string {
	var out []string
	if site.Said != "" {
		out = append(out, site.Said)
	}
	if gymConfig != "" {
		out = append(out, "Gym config "+gymConfig)
	}
	switch spec {
	case "-":
	case "":
		out = append(out, "a bare --gym-otel")
	default:
		out = append(out, "--gym-otel="+spec)
	}
	if len(out) == 0 {
		return "no site settings"
	}
	return strings.Join(out, "; ")
}

// withChecked adds the checked: line to err.
func withChecked(err error, checked string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w\nchecked: %s", err, checked)
}
