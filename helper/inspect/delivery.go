package inspect

import (
	"github.com/gym-otel-spank/gym-otel-spank/helper/delivery"
	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
)

// liveDelivery brings a receipt's delivery section (otel.delivery: files)
// up to the node dir's checkpoint (delivery.json) as it is now: a replay
// after the drain advanced it, and the backend's copy is what the
// checkpoint says. The catch-ups stay the receipt's. A checkpoint that
// cannot be read leaves the receipt's figures.
func liveDelivery(dir string, rc *receipt.Receipt) {
	d := rc.Delivery
	if d == nil {
		return
	}
	cp, err := delivery.ReadCheckpoint(dir)
	if err != nil {
		return
	}
	bl, err := delivery.Backlogs(dir)
	if err != nil {
		return
	}
	n := delivery.Totals(cp, bl)
	n.CatchUps = d.CatchUps
	if n.Backlog > 0 || n.BacklogLines > 0 {
		n.Error = d.Error
	}
	*d = n
}

// deliveryTrouble reports whether a receipt's delivery section leaves the
// backend's copy incomplete or caught up late (shown whole, not folded).
func deliveryTrouble(rc *receipt.Receipt) bool {
	return rc.Delivery != nil && (!rc.Delivery.Complete() || len(rc.Delivery.CatchUps) > 0)
}
