package inspect

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
)

// The Prometheus receiver's per-scrape report samples read for the scrape
// limits (besides up).
const (
	mScrapeSamples  = "scrape_samples_scraped"
	mScrapeBodySize = "scrape_body_size_bytes" // extra_scrape_metrics: -1 when body_size_limit stopped the read
)

// LimitHits says which scrape limits a target hit, from the receiver's
// report samples of each scrape.
type LimitHits struct {
	// SampleLimit is the scrape job's sample_limit (collector.yaml; 0 when
	// none). SampleLimitHits counts scrapes whose page held more samples
	// (scrape_samples_scraped over it); MaxSamples is the largest such count.
	SampleLimit     int64 `json:"sample_limit,omitempty"`
	SampleLimitHits int   `json:"sample_limit_hits,omitempty"`
	MaxSamples      int64 `json:"max_samples,omitempty"`
	// BodyLimitHits counts scrapes stopped by body_size_limit
	// (scrape_body_size_bytes = -1).
	BodyLimitHits int `json:"body_size_limit_hits,omitempty"`
	// RefusedPages counts failed scrapes (up = 0) whose page had been
	// partly parsed (0 < scrape_samples_scraped <= sample_limit): a label
	// limit (label_limit, label_name_length_limit,
	// label_value_length_limit) or a malformed page.
	RefusedPages int `json:"refused_pages,omitempty"`
}

// Any reports whether a limit was hit or a page refused.
func (h LimitHits) Any() bool { return h.SampleLimitHits+h.BodyLimitHits+h.RefusedPages > 0 }

// String is one line naming each limit hit; "" when none.
func (h LimitHits) String() string {
	var parts []string
	if h.SampleLimitHits > 0 {
		parts = append(parts, fmt.Sprintf("sample_limit %d exceeded in %d scrape(s) (up to %d samples)", h.SampleLimit, h.SampleLimitHits, h.MaxSamples))
	}
	if h.BodyLimitHits > 0 {
		parts = append(parts, fmt.Sprintf("body_size_limit exceeded in %d scrape(s)", h.BodyLimitHits))
	}
	if h.RefusedPages > 0 {
		parts = append(parts, fmt.Sprintf("%d page(s) refused while parsing (a label limit or a malformed page)", h.RefusedPages))
	}
	return strings.Join(parts, "; ")
}

// scrapeStat follows one target's report samples while the files stream.
type scrapeStat struct {
	LimitHits
	upMs, samplesMs int64 // timestamps of the last up and samples points
	up, samples     float64
}

// sampleLimits returns the sample_limit of each scrape target of
// dir/collector.yaml by (job, instance); nil when it cannot be read.
func sampleLimits(dir string) map[[2]string]int64 {
	data, err := os.ReadFile(filepath.Join(dir, jobdir.ConfigFile))
	if err != nil {
		return nil
	}
	var cfg struct {
		Receivers map[string]struct {
			Config struct {
				ScrapeConfigs []struct {
					JobName       string `yaml:"job_name"`
					SampleLimit   int64  `yaml:"sample_limit"`
					StaticConfigs []struct {
						Labels map[string]string `yaml:"labels"`
					} `yaml:"static_configs"`
				} `yaml:"scrape_configs"`
			} `yaml:"config"`
		} `yaml:"receivers"`
	}
	if yaml.Unmarshal(data, &cfg) != nil {
		return nil
	}
	unesc := func(s string) string { return strings.ReplaceAll(s, "$$", "$") }
	var names []string
	for name := range cfg.Receivers {
		names = append(names, name)
	}
	sort.Strings(names)
	out := map[[2]string]int64{}
	for _, name := range names {
		for _, sc := range cfg.Receivers[name].Config.ScrapeConfigs {
			for _, st := range sc.StaticConfigs {
				out[[2]string{unesc(sc.JobName), unesc(st.Labels["instance"])}] = sc.SampleLimit
			}
		}
	}
	return out
}

// scrapeReport takes one point of a target's scrape report (up,
// scrape_samples_scraped, scrape_body_size_bytes) at ms into d's limit
// figures. The report samples of one scrape share its timestamp.
func (d *dirStat) scrapeReport(name, producer, instance string, ms int64, v float64) {
	if name != mUp && name != mScrapeSamples && name != mScrapeBodySize {
		return
	}
	if d.scrape == nil {
		d.scrape = map[[2]string]*scrapeStat{}
		d.sampleLimit = sampleLimits(d.src.Dir)
	}
	k := [2]string{producer, instance}
	s := d.scrape[k]
	if s == nil {
		s = &scrapeStat{upMs: -1, samplesMs: -1}
		s.SampleLimit = d.sampleLimit[k]
		d.scrape[k] = s
	}
	switch name {
	case mScrapeBodySize:
		if v == -1 {
			s.BodyLimitHits++
		}
		return
	case mUp:
		s.up, s.upMs = v, ms
	case mScrapeSamples:
		s.samples, s.samplesMs = v, ms
	}
	if s.upMs != ms || s.samplesMs != ms {
		return
	}
	s.upMs, s.samplesMs = -1, -1 // counted once
	n := int64(s.samples)
	switch {
	case s.SampleLimit > 0 && n > s.SampleLimit:
		s.SampleLimitHits++
		s.MaxSamples = max(s.MaxSamples, n)
	case s.up == 0 && n > 0:
		s.RefusedPages++
	}
}
