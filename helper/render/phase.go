package render

// The phase of a target's first scrape.
//
// The Prometheus receiver's scrape loop (Prometheus v0.314.0 scrape
// package, the receiver of MinCollectorVersion) does not scrape a new target
// at once: it waits for the target's wall-clock phase,
//
//	offset = (target.hash() ^ offsetSeed) mod interval
//
// and scrapes at every instant t with t mod interval == offset
// (scrape/target.go Target.offset). target.hash() is FNV-1a 64 of the
// decimal labels hash ("%016d") followed by the target's URL; offsetSeed is
// FNV-1a 64 of the collector host's FQDN followed by the external labels
// (scrape/manager.go setOffsetSeed; none are rendered: "{}"). The
// receiver's configuration cannot set the offset (initial_scrape_offset
// only adds to it). So a new target waits between 0 and one interval,
// uniformly: 7.5 s on average at 15 s.
//
// But the URL is ours: a query parameter (PhaseParam, sent to the exporter
// and ignored by it, never a label of a series) changes the hash. Render
// tries values of the parameter until the target's phase falls just after
// FirstScrape.At, the moment the supervisor expects the scrape loop to
// have started: the first scrape comes then, not up to an interval later.
// A loop that starts after the phase has passed waits a whole interval (the
// old worst case), which is why FirstScrape.At carries a margin.

import (
	"fmt"
	"hash/fnv"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
)

// PhaseParam is the scrape query parameter whose value Render chooses so
// that a target's first scrape falls at FirstScrape.At (phase.go). The
// exporters scraped (vLLM's prometheus_client, node_exporter,
// dcgm-exporter, the supervisor's cgroup server) ignore parameters they do
// not know.
const PhaseParam = "gym_otel_phase"

// FirstScrape asks Render to choose each scrape target's phase.
type FirstScrape struct {
	// At is the wall-clock instant at which the first scrape of every
	// target should come (or within PhaseWindow after it). It should lie
	// after the collector's scrape loops start: a phase that has passed
	// when they start costs a whole interval.
	At time.Time
	// Host is the collector host's name as Prometheus sees it
	// (PrometheusFQDN): part of its offset seed.
	Host string
}

// PhaseWindow is how far after FirstScrape.At a chosen phase may fall.
// Render tries about interval/PhaseWindow values per target (300 at 15 s).
const PhaseWindow = 50 * time.Millisecond

// maxPhaseTries bounds the values Render tries per target; it then takes
// the best one found (the phase soonest after FirstScrape.At).
const maxPhaseTries = 200000

// PrometheusFQDN is the host name the Prometheus scrape manager hashes into
// its offset seed (util/osutil.GetFQDN): the first name the reverse lookup
// of the host's addresses (IPv4 first, each also as IPv6) gives, else the
// host name. It is the same lookup on the same host as the collector's, so
// the same name unless the resolver answers differently within the
// collector's start.
func PrometheusFQDN() (string, error) {
	hostname, err := os.Hostname()
	if err != nil {
		return "", err
	}
	ips, err := net.LookupIP(hostname)
	if err != nil {
		return hostname, nil
	}
	lookup := func(ip net.IP) (string, bool) {
		txt, err := ip.MarshalText()
		if err != nil {
			return "", false
		}
		hosts, err := net.LookupAddr(string(txt))
		if err != nil || len(hosts) == 0 {
			return "", false
		}
		return hosts[0], true
	}
	for _, addr := range ips {
		if ip := addr.To4(); ip != nil {
			if fqdn, ok := lookup(ip); ok {
				return fqdn, nil
			}
		}
		if ip := addr.To16(); ip != nil {
			if fqdn, ok := lookup(ip); ok {
				return fqdn, nil
			}
		}
	}
	return hostname, nil
}

// OffsetSeed is the Prometheus scrape manager's offset seed for host (see
// PrometheusFQDN) and no external labels.
func OffsetSeed(host string) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s%s", host, "{}")
	return h.Sum64()
}

// TargetPhase is Prometheus' phase of a target within interval (in ns, the
// instant mod interval of its scrapes): lbls are the target's labels after
// relabeling, internal ones included (targetLabels), rawURL its scrape URL.
func TargetPhase(lbls map[string]string, rawURL string, seed uint64, interval time.Duration) time.Duration {
	h := fnv.New64a()
	fmt.Fprintf(h, "%016d", labelsHash(lbls))
	h.Write([]byte(rawURL))
	return time.Duration((h.Sum64() ^ seed) % uint64(interval))
}

// labelsHash is model/labels Labels.Hash of the default (stringlabels)
// build: xxhash64 of the labels sorted by name, each name and value
// preceded by its length (one byte below 255, else 255 and three bytes
// little-endian).
func labelsHash(lbls map[string]string) uint64 {
	names := make([]string, 0, len(lbls))
	for n := range lbls {
		names = append(names, n)
	}
	sort.Strings(names)
	var b []byte
	put := func(s string) {
		if n := len(s); n < 255 {
			b = append(b, byte(n))
		} else {
			b = append(b, 255, byte(n), byte(n>>8), byte(n>>16))
		}
		b = append(b, s...)
	}
	for _, n := range names {
		put(n)
		put(lbls[n])
	}
	return xxhash.Sum64(b)
}

// scrapeTarget is what decides a static target's phase: its scrape job's
// settings and its one static_configs entry.
type scrapeTarget struct {
	job             string
	interval        time.Duration
	timeout         time.Duration
	address         string // host:port
	metricsPath     string
	labels          [][2]string // the group's labels (instance, ...)
	phaseParamValue string      // "" for none
}

// The labels Prometheus sets on a target before its relabelling, by the
// names of github.com/prometheus/common/model (not linked here: it brings
// the protobuf runtime into the plugin's core, which renders nothing of
// this; TestPromLabelNames compares them).
const (
	promAddressLabel        = "__address__"
	promJobLabel            = "job"
	promScrapeIntervalLabel = "__scrape_interval__"
	promScrapeTimeoutLabel  = "__scrape_timeout__"
	promMetricsPathLabel    = "__metrics_path__"
	promSchemeLabel         = "__scheme__"
	promParamLabelPrefix    = "__param_"
	promInstanceLabel       = "instance"
)

// promDuration is d as Prometheus writes a duration (model.Duration's
// String: years and weeks only when exact, then days, hours, minutes,
// seconds and milliseconds, "0s" for none; TestPromDuration compares).
func promDuration(d time.Duration) string {
	ms := int64(d / time.Millisecond)
	if ms == 0 {
		return "0s"
	}
	var b strings.Builder
	if ms < 0 {
		b.WriteByte('-')
		ms = -ms
	}
	for _, u := range []struct {
		unit  string
		mult  int64
		exact bool
	}{
		{"y", 1000 * 60 * 60 * 24 * 365, true}, {"w", 1000 * 60 * 60 * 24 * 7, true},
		{"d", 1000 * 60 * 60 * 24, false}, {"h", 1000 * 60 * 60, false}, {"m", 1000 * 60, false},
		{"s", 1000, false}, {"ms", 1, false},
	} {
		if u.exact && ms%u.mult != 0 {
			continue
		}
		if v := ms / u.mult; v > 0 {
			b.WriteString(strconv.FormatInt(v, 10))
			b.WriteString(u.unit)
			ms -= v * u.mult
		}
	}
	return b.String()
}

// targetLabels are the labels Prometheus gives a static target of a scrape
// job without relabel_configs (scrape/target.go PopulateLabels, defaults of
// the receiver's configuration: scheme http, no native histograms).
func (t scrapeTarget) targetLabels() map[string]string {
	l := map[string]string{
		promAddressLabel:                         t.address,
		promJobLabel:                             t.job,
		promScrapeIntervalLabel:                  promDuration(t.interval),
		promScrapeTimeoutLabel:                   promDuration(t.timeout),
		promMetricsPathLabel:                     t.metricsPath,
		promSchemeLabel:                          "http",
		"__convert_classic_histograms_to_nhcb__": "false",
		"__always_scrape_classic_histograms__":   "false",
		"__scrape_native_histograms__":           "false",
	}
	for _, kv := range t.labels {
		l[kv[0]] = kv[1]
	}
	if t.phaseParamValue != "" {
		l[promParamLabelPrefix+PhaseParam] = t.phaseParamValue
	}
	if l[promInstanceLabel] == "" {
		l[promInstanceLabel] = t.address
	}
	return l
}

// url is the target's scrape URL as Prometheus writes it (Target.URL).
func (t scrapeTarget) url() string {
	u := url.URL{Scheme: "http", Host: t.address, Path: t.metricsPath}
	if t.phaseParamValue != "" {
		u.RawQuery = url.Values{PhaseParam: {t.phaseParamValue}}.Encode()
	}
	return u.String()
}

// phase is the target's phase for seed.
func (t scrapeTarget) phase(seed uint64) time.Duration {
	return TargetPhase(t.targetLabels(), t.url(), seed, t.interval)
}

// choosePhase returns the PhaseParam value whose phase falls soonest at or
// after fs.At (within PhaseWindow when one is found in maxPhaseTries), and
// the wait from fs.At to that phase.
func choosePhase(t scrapeTarget, fs FirstScrape) (string, time.Duration) {
	seed := OffsetSeed(fs.Host)
	want := time.Duration(fs.At.UnixNano() % int64(t.interval))
	best, bestWait := "", t.interval
	for i := 0; i < maxPhaseTries; i++ {
		t.phaseParamValue = strconv.Itoa(i)
		wait := (t.phase(seed) - want + t.interval) % t.interval
		if wait < bestWait {
			best, bestWait = t.phaseParamValue, wait
			if wait < PhaseWindow {
				break
			}
		}
	}
	return best, bestWait
}
