package main

import (
	"errors"
	"strings"
	"testing"
)

// TestHostRowsOwnStart: samples measured before a failed run make the row
// (the failure said in its spread); without samples the row says why.
func TestHostRowsOwnStart(t *testing.T) {
	failed := errors.New("the collector was not healthy within 10 s")
	rows, ownMs := hostRows(ownStarts{wall: []float64{60, 70, 80}, cpu: []float64{50, 50, 60}, err: failed})
	if ownMs != 70 || rows[0].Figure != "70 ms (CPU 50 ms)" || !strings.HasPrefix(rows[0].Spread, "some runs failed: "+failed.Error()) {
		t.Errorf("with samples and a failure: ownMs %v, row %+v", ownMs, rows[0])
	}
	rows, ownMs = hostRows(ownStarts{err: failed})
	if ownMs != 0 || rows[0].Figure != "not measured: "+failed.Error() {
		t.Errorf("a failure alone: ownMs %v, row %+v", ownMs, rows[0])
	}
	rows, ownMs = hostRows(ownStarts{})
	if ownMs != 0 || rows[0].Figure != "not measured: no one-node flagged job" {
		t.Errorf("nothing: ownMs %v, row %+v", ownMs, rows[0])
	}
}
