package config

import "fmt"

// checkDelivery checks otel.delivery and otel.delivery_rate_cap, naming
// the key. Values parsed from YAML or items are checked at parse; this
// catches forwarded settings (where "" and 0, from an older submit, read
// as the defaults: delivery "files", DefaultDeliveryRateCap).
func (o *Otel) checkDelivery() []error {
	var errs []error
	switch o.Delivery {
	case "", DeliveryCollector, DeliveryFiles, DeliveryNone:
	default:
		errs = append(errs, fmt.Errorf("otel.delivery: %q is not %s, %s or %s", o.Delivery, DeliveryCollector, DeliveryFiles, DeliveryNone))
	}
	k, _ := lookupKey("delivery_rate_cap")
	if o.DeliveryRateCap != 0 && (o.DeliveryRateCap < k.min || o.DeliveryRateCap > k.max) {
		errs = append(errs, fmt.Errorf("otel.delivery_rate_cap: %d is out of range %d..%d (items per second per node)", o.DeliveryRateCap, k.min, k.max))
	}
	return errs
}

// RateCap is delivery_rate_cap, items per second (DefaultDeliveryRateCap
// when unset, as in settings forwarded by an older submit).
func (o Otel) RateCap() int {
	if o.DeliveryRateCap == 0 {
		return DefaultDeliveryRateCap
	}
	return o.DeliveryRateCap
}
