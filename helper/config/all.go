package config

import (
	"errors"
	"regexp"
	"strings"
	"sync"
)

// AlsoValidate is what a check reports when Resolve failed: resolveErr
// together with Validate's errors of what did resolve, so that a config
// with several mistakes shows every one in one run. Validate's errors about
// a key that resolveErr already names are left out (that key kept its
// default or another layer's value, and the first error is the one to
// fix); so are its "not set" errors, and the default token variable's
// absence, when the site file or the Gym config cannot be read or is not
// YAML (that file's one error is the cause). Every otel.<key> error of
// Validate is prefixed with where the key
// was set (file:line, or the inline source), from in's layers. r may be
// nil (then resolveErr alone). Validate's warnings are returned too.
func AlsoValidate(r *Resolved, in Inputs, resolveErr error, env LookupEnv) ([]string, error) {
	if r == nil {
		return nil, resolveErr
	}
	var verr error
	var warnings []string
	if r.Otel.Enabled {
		warnings, verr = r.Validate(env)
	}
	if verr == nil {
		return warnings, resolveErr
	}
	named := map[string]bool{}
	for _, e := range flatten(resolveErr) {
		for _, m := range keyRE().FindAllStringSubmatch(e.Error(), -1) {
			named[m[1]] = true
		}
		for _, m := range itemRE().FindAllStringSubmatch(e.Error(), -1) {
			named[m[1]] = true
		}
		// A misspelt key names the one meant: its "not set" is the same
		// mistake.
		for _, m := range meantRE().FindAllStringSubmatch(e.Error(), -1) {
			named[m[1]] = true
		}
	}
	// A site file or a Gym config that cannot be read or parsed sets
	// nothing: the keys only it would set are "not set" because of that
	// one error, said already, and so is the default token variable's
	// absence (the file may name another).
	unread := false
	if in.SiteFile != "" {
		_, err := readYAML(in.SiteFile)
		unread = err != nil
	}
	if spec, _ := ParseSpec(in.Spec); spec.ConfigPath != "" {
		_, err := readYAML(absUnder(in.WorkDir, spec.ConfigPath))
		unread = unread || err != nil
	}
	origins := Origins(in)
	errs := []error{resolveErr}
	for _, e := range flatten(verr) {
		m := leadKeyRE().FindStringSubmatch(e.Error())
		if m != nil && named[m[1]] {
			continue
		}
		if m != nil && unread && (notSetRE().MatchString(e.Error()) || m[1] == "token_env" && origins["token_env"] == "") {
			continue
		}
		if m != nil && origins[m[1]] != "" && !strings.HasPrefix(e.Error(), origins[m[1]]) {
			e = prefixed{origins[m[1]], e}
		}
		errs = append(errs, e)
	}
	return warnings, errors.Join(errs...)
}

// ValidateWhere is Validate with each otel.<key> error prefixed with where
// the key was set (see AlsoValidate).
func (r *Resolved) ValidateWhere(in Inputs, env LookupEnv) ([]string, error) {
	warnings, err := r.Validate(env)
	if err == nil {
		return warnings, nil
	}
	origins := Origins(in)
	var errs []error
	for _, e := range flatten(err) {
		if m := leadKeyRE().FindStringSubmatch(e.Error()); m != nil && origins[m[1]] != "" {
			e = prefixed{origins[m[1]], e}
		}
		errs = append(errs, e)
	}
	return warnings, errors.Join(errs...)
}

var (
	keyRE  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`otel\.([a-z_]+)`) })
	itemRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?:^|: )([a-z_]+)(?:=[^:]*)?: (?:unknown|given twice)`)
	})
	leadKeyRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^otel\.([a-z_]+)`) })
	meantRE   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`did you mean "([a-z_]+)"`) })
	notSetRE  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^otel\.[a-z_]+: not set\b`) })
)

type prefixed struct {
	where string
	err   error
}

func (p prefixed) Error() string { return p.where + ": " + p.err.Error() }
func (p prefixed) Unwrap() error { return p.err }

// flatten returns the leaves of joined errors.
func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// Origins says, per otel key, where the layer that decides its value set
// it: "file:line" for the site file and the Gym config, the inline source
// ("plugstack.conf", "--gym-otel") for items. Keys no layer sets are
// absent. Layers that do not parse are skipped (their errors are
// Resolve's); pins are not applied.
func Origins(in Inputs) map[string]string {
	out := map[string]string{}
	note := func(l Layer) {
		for _, s := range l.settings {
			out[s.def.name] = s.where
		}
	}
	if in.SiteFile != "" {
		if s, err := LoadSite(in.SiteFile); err == nil || len(s.Layer.settings) > 0 {
			note(s.Layer)
		}
	}
	if len(in.SiteItems) > 0 {
		l, _ := ParseInline("plugstack.conf", in.SiteItems)
		note(l)
	}
	// A SPEC with a bad item still sets its good ones (Resolve applies
	// them too).
	spec, _ := ParseSpec(in.Spec)
	if spec.ConfigPath != "" {
		if g, _ := LoadGymConfig(absUnder(in.WorkDir, spec.ConfigPath)); g != nil {
			note(g.Otel)
		}
	}
	l, _ := ParseInline("--gym-otel", spec.Otel)
	note(l)
	return out
}
