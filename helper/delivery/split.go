package delivery

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// A line of the files holds a whole batch of the collector's (up to its
// batch processor's 8,192 items): a request of one line cannot be made
// smaller by lines. splitRequest cuts such a request into requests of at
// most max items each, in order: its resources, scopes and items as they
// are, each part holding consecutive items of one or more scopes (a
// metric's data points stay together: the metric is the unit).

// scopeKeys are, per signal, a resource's scope array key and a scope's
// item array key.
var scopeKeys = map[string][2]string{
	"traces":  {"scopeSpans", "spans"},
	"metrics": {"scopeMetrics", "metrics"},
	"logs":    {"scopeLogs", "logRecords"},
}

// part is one request of a split: its body and items.
type part struct {
	body  []byte
	items int64
}

// entry is one item of a request (a span, a metric, a log record) and
// where it stands.
type entry struct {
	res, scope int
	raw        json.RawMessage
	items      int64
}

// splitRequest cuts body, one export request of sig in OTLP-JSON, into
// parts of at most max items each (an item larger than max alone). An
// error when body is not an export request.
func splitRequest(sig string, body []byte, max int64) ([]part, error) {
	keys, ok := scopeKeys[sig]
	if !ok {
		return nil, fmt.Errorf("no signal %q", sig)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, err
	}
	var rs []map[string]json.RawMessage
	if err := json.Unmarshal(top[resourceKeys[sig]], &rs); err != nil {
		return nil, err
	}
	scopes := make([][]map[string]json.RawMessage, len(rs))
	var entries []entry
	for i, r := range rs {
		if raw := r[keys[0]]; len(raw) > 0 {
			if err := json.Unmarshal(raw, &scopes[i]); err != nil {
				return nil, err
			}
		}
		for j, sc := range scopes[i] {
			var items []json.RawMessage
			if raw := sc[keys[1]]; len(raw) > 0 {
				if err := json.Unmarshal(raw, &items); err != nil {
					return nil, err
				}
			}
			for _, it := range items {
				n := int64(1)
				if sig == "metrics" {
					wrapped := []byte(`{"resourceMetrics":[{"scopeMetrics":[{"metrics":[` + string(it) + `]}]}]}`)
					n, _ = countItems(sig, wrapped)
				}
				entries = append(entries, entry{res: i, scope: j, raw: it, items: n})
			}
		}
	}
	var parts []part
	for start := 0; start < len(entries); {
		end, items := start, int64(0)
		for end < len(entries) && (end == start || items+entries[end].items <= max) {
			items += entries[end].items
			end++
		}
		b, err := renderPart(sig, keys, rs, scopes, entries[start:end])
		if err != nil {
			return nil, err
		}
		parts = append(parts, part{body: b, items: items})
		start = end
	}
	return parts, nil
}

// renderPart is the export request of entries: each resource and scope
// they stand in, with only their items.
func renderPart(sig string, keys [2]string, rs []map[string]json.RawMessage, scopes [][]map[string]json.RawMessage, entries []entry) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString(`{"` + resourceKeys[sig] + `":[`)
	for i := 0; i < len(entries); {
		res := entries[i].res
		r := map[string]json.RawMessage{}
		for k, v := range rs[res] {
			r[k] = v
		}
		var scs []map[string]json.RawMessage
		for i < len(entries) && entries[i].res == res {
			sc := entries[i].scope
			s := map[string]json.RawMessage{}
			for k, v := range scopes[res][sc] {
				s[k] = v
			}
			var items []json.RawMessage
			for i < len(entries) && entries[i].res == res && entries[i].scope == sc {
				items = append(items, entries[i].raw)
				i++
			}
			raw, err := json.Marshal(items)
			if err != nil {
				return nil, err
			}
			s[keys[1]] = raw
			scs = append(scs, s)
		}
		raw, err := json.Marshal(scs)
		if err != nil {
			return nil, err
		}
		r[keys[0]] = raw
		rb, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		if buf.Len() > len(resourceKeys[sig])+5 {
			buf.WriteByte(',')
		}
		buf.Write(rb)
	}
	buf.WriteString("]}")
	return buf.Bytes(), nil
}
