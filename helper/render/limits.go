package render

import (
	"fmt"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
)

// scrapeLimits are the limits of every scrape job (the otel.scrape_* keys):
// a page over any of them fails that scrape (up = 0) instead of growing the
// collector, and extra_scrape_metrics adds scrape_sample_limit and
// scrape_body_size_bytes (-1 when body_size_limit stopped the read) to each
// scrape's report, so inspect can say which limit a target hit. No
// target_limit: every job has one static target.
func scrapeLimits(o config.Otel) omap {
	return omap{
		{"sample_limit", o.ScrapeSampleLimit},
		{"body_size_limit", fmt.Sprintf("%dMiB", o.ScrapeBodySizeLimitMiB)},
		{"label_limit", o.ScrapeLabelLimit},
		{"label_name_length_limit", o.ScrapeLabelNameLengthLimit},
		{"label_value_length_limit", o.ScrapeLabelValueLengthLimit},
		{"extra_scrape_metrics", true},
	}
}
