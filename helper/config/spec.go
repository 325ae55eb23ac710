package config

import (
	"errors"
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/yamlnode"
	"regexp"
	"strings"
	"sync"
)

// Item is one key=value of a SPEC or of plugstack.conf, unescaped.
type Item struct {
	Key   string
	Value string
}

// Spec is the parsed value of --gym-otel[=SPEC].
//
// Grammar:
//
//	SPEC  = "" | "on" | "off" | item *("," item)
//	item  = key "=" value
//	key   = 1*( "a".."z" | "0".."9" | "_" )
//	value = *( char | "\," | "\=" | "\\" )
//
// An empty SPEC (a bare --gym-otel, which Slurm 24.11 passes as the literal
// "(null)") and "on" mean on with the site defaults; "off" opts the job out
// (also under the site's default=on). A backslash escapes a comma, an equals
// sign or a backslash inside a value. In gym_span_groups a "+" also separates
// groups, so gym_span_groups=default+verify+sandbox needs no escapes.
// Keys: config (the job's resolved NeMo Gym submit config), the identity
// keys run_id, benchmark, model, cluster and job_dir (%j, %A, %a expand as in
// sbatch --output), and every otel key.
type Spec struct {
	// Off is true for "off" (or enabled=false).
	Off bool
	// ConfigPath is config=, the job's NeMo Gym submit config ("" for none).
	ConfigPath string
	// Identity holds run_id, benchmark, model and cluster as given.
	Identity Identity
	// JobDir is job_dir= as given, with %j/%A/%a unexpanded.
	JobDir string
	// Otel holds the otel key items in the order given.
	Otel []Item
}

// Identity is the run identity stamped on every resource. Empty fields are
// omitted from the telemetry, never sent empty.
type Identity struct {
	RunID     string `json:"run_id,omitempty"`
	Benchmark string `json:"benchmark,omitempty"`
	Model     string `json:"model,omitempty"`
	Cluster   string `json:"cluster,omitempty"`
}

// ParseSpec parses SPEC (see Spec). Every bad item is reported, each error
// naming the item.
func ParseSpec(s string) (Spec, error) {
	var sp Spec
	switch strings.TrimSpace(s) {
	case "", "(null)", "on":
		return sp, nil
	case "off":
		sp.Off = true
		return sp, nil
	}
	items, err := SplitItems(s)
	if err != nil {
		return sp, err
	}
	var errs []error
	seen := map[string]bool{}
	for _, it := range items {
		if seen[it.Key] {
			errs = append(errs, fmt.Errorf("--gym-otel: %s: given twice", it.Key))
			continue
		}
		seen[it.Key] = true
		switch it.Key {
		case "config":
			sp.ConfigPath = it.Value
		case "run_id":
			sp.Identity.RunID = it.Value
		case "benchmark":
			sp.Identity.Benchmark = it.Value
		case "model":
			sp.Identity.Model = it.Value
		case "cluster":
			sp.Identity.Cluster = it.Value
		case "job_dir":
			sp.JobDir = it.Value
		default:
			if _, ok := lookupKey(it.Key); !ok {
				errs = append(errs, fmt.Errorf("--gym-otel: %s=%s: unknown item%s", it.Key, it.Value, suggestSpec(it.Key)))
				continue
			}
			if it.Key == "gym_span_groups" {
				it.Value = strings.ReplaceAll(it.Value, "+", ",")
			}
			if it.Key == "enabled" && it.Value == "false" {
				sp.Off = true
			}
			sp.Otel = append(sp.Otel, it)
		}
	}
	return sp, errors.Join(errs...)
}

// SplitItems splits "k=v,k=v" on unescaped commas and unescapes each value
// (see Spec for the escapes). Used for SPEC and for plugstack arguments.
func SplitItems(s string) ([]Item, error) {
	var items []Item
	var errs []error
	var cur strings.Builder
	var key string
	haveKey := false
	list := "" // the list item a stray part may belong to: key=value+...
	flush := func() {
		raw := cur.String()
		cur.Reset()
		switch {
		case !haveKey && raw == "":
			errs = append(errs, fmt.Errorf("--gym-otel: empty item in %q", s))
		case !haveKey && list != "" && listValueRE().MatchString(raw):
			// gym_span_groups=default,verify: the comma meant "and".
			list += "+" + raw
			errs = append(errs, fmt.Errorf("--gym-otel: %s: expected key=value (the values of a list item are joined with +, not with a comma: %s)", raw, list))
		case !haveKey:
			errs = append(errs, fmt.Errorf("--gym-otel: %s: expected key=value", raw))
		case !validKey(key):
			errs = append(errs, fmt.Errorf("--gym-otel: %q: not a valid key (lower-case letters, digits, _)", key))
			list = ""
		default:
			items = append(items, Item{Key: key, Value: raw})
			list = ""
			if listKeys[key] {
				list = key + "=" + raw
			}
		}
		key, haveKey = "", false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			if i+1 >= len(s) || !strings.ContainsRune(`,=\`, rune(s[i+1])) {
				errs = append(errs, fmt.Errorf("--gym-otel: bad escape at offset %d of %q: only \\, \\= and \\\\ are escapes", i, s))
				continue
			}
			i++
			cur.WriteByte(s[i])
		case c == '=' && !haveKey:
			key, haveKey = cur.String(), true
			cur.Reset()
		case c == ',':
			flush()
		default:
			cur.WriteByte(c)
		}
	}
	flush()
	return items, errors.Join(errs...)
}

// listKeys are the SPEC items whose value is a list joined with "+".
var listKeys = map[string]bool{"gym_span_groups": true}

// listValueRE is what one value of a list item looks like (a span group).
var listValueRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_.-]+$`) })

// EscapeValue escapes a value for a SPEC item (the inverse of SplitItems).
func EscapeValue(v string) string {
	r := strings.NewReplacer(`\`, `\\`, `,`, `\,`, `=`, `\=`)
	return r.Replace(v)
}

// FormatSpec joins items into a SPEC, escaping values.
func FormatSpec(items []Item) string {
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = it.Key + "=" + EscapeValue(it.Value)
	}
	return strings.Join(parts, ",")
}

func validKey(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

var specOnlyKeys = []string{"config", "run_id", "benchmark", "model", "cluster", "job_dir"}

func suggestSpec(name string) string {
	best, bestD := "", 1<<30
	for _, k := range append(append([]string{}, specOnlyKeys...), Keys()...) {
		if d := yamlnode.EditDistance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	if bestD <= max(2, len(name)/3) {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return ""
}
