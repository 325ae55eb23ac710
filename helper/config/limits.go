package config

import "fmt"

// scrapeLimitKeys are the keys of the scrape jobs' limits.
var scrapeLimitKeys = []string{"scrape_sample_limit", "scrape_body_size_limit_mib", "scrape_label_limit",
	"scrape_label_name_length_limit", "scrape_label_value_length_limit"}

// checkScrapeLimits returns an error per scrape limit outside its key's
// range, naming the key. Values parsed from YAML or items are checked at
// parse; this catches forwarded settings that carry none (0, which
// Prometheus reads as "no limit") or a forged one.
func (o *Otel) checkScrapeLimits() []error {
	vals := []int{o.ScrapeSampleLimit, o.ScrapeBodySizeLimitMiB, o.ScrapeLabelLimit,
		o.ScrapeLabelNameLengthLimit, o.ScrapeLabelValueLengthLimit}
	var errs []error
	for i, name := range scrapeLimitKeys {
		k, _ := lookupKey(name)
		if vals[i] < k.min || vals[i] > k.max {
			errs = append(errs, fmt.Errorf("otel.%s: %d is out of range %d..%d", name, vals[i], k.min, k.max))
		}
	}
	return errs
}
