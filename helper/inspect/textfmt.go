package inspect

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

type textOut struct {
	w   io.Writer
	err error
}

func (t *textOut) line(format string, a ...any) {
	if t.err != nil {
		return
	}
	s := strings.TrimRight(fmt.Sprintf(format, a...), " ")
	if len([]rune(s)) > Width {
		s = string([]rune(s)[:Width-3]) + "..."
	}
	_, t.err = fmt.Fprintln(t.w, s)
}

// wrap prints text after prefix, wrapped at word boundaries within Width,
// continuation lines indented like the prefix.
func (t *textOut) wrap(prefix, text string) {
	indent := strings.Repeat(" ", len(prefix))
	cur := prefix
	for _, word := range strings.Fields(text) {
		if len(cur)+1+len(word) > Width && strings.TrimSpace(cur) != strings.TrimSpace(prefix) {
			t.line("%s", cur)
			cur = indent
		}
		if cur != prefix && cur != indent {
			cur += " "
		}
		cur += word
	}
	t.line("%s", cur)
}

// wrapHanging is wrap with the continuation lines indented by indent.
func (t *textOut) wrapHanging(prefix, indent, text string) {
	cur := prefix
	for _, word := range strings.Fields(text) {
		if len(cur)+1+len(word) > Width && strings.TrimSpace(cur) != strings.TrimSpace(prefix) {
			t.line("%s", cur)
			cur = indent
		}
		if cur != prefix && cur != indent {
			cur += " "
		}
		cur += word
	}
	t.line("%s", cur)
}

func (t *textOut) section(name string) { t.line("%s", "== "+name) }

func f(v Value, prec int) string {
	if !v.Known() {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, float64(v))
}

func pct(v Value) string {
	if !v.Known() {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(v))
}

func secs(v Value) string {
	if !v.Known() {
		return "-"
	}
	return fmt.Sprintf("%.1f s", float64(v))
}

// quant is a distribution in one line. A histogram whose observations
// fell into one bucket shows the range that holds them, not quantiles;
// an unknown min and max (a Prometheus histogram) says so.
func quant(q Quantiles, prec int) string {
	head := fmt.Sprintf("n %s  mean %s  ", f(q.Count, 0), f(q.Mean, prec))
	if q.Within != nil {
		return head + within(q, prec) + " (one bucket: no quantiles)"
	}
	s := head + fmt.Sprintf("p50 %s  p90 %s  p99 %s", f(q.P50, prec), f(q.P90, prec), f(q.P99, prec))
	if q.Min.Known() && q.Max.Known() {
		return s + fmt.Sprintf("  min %s  max %s", f(q.Min, prec), f(q.Max, prec))
	}
	if q.Max.Known() {
		return s + fmt.Sprintf("  max %s", f(q.Max, prec))
	}
	return s + "  max - (buckets only)"
}

// quantShort is p50 and p99 (or the one bucket's range) with a unit.
func quantShort(q Quantiles, prec int, unit string) string {
	if q.Within != nil {
		return within(q, prec) + " " + unit
	}
	return fmt.Sprintf("p50 %s %s  p99 %s %s", f(q.P50, prec), unit, f(q.P99, prec), unit)
}

// within is the range of a one-bucket histogram.
func within(q Quantiles, prec int) string {
	lo, hi := q.Within[0], q.Within[1]
	switch {
	case lo.Known() && hi.Known() && lo == hi:
		return "all " + f(lo, prec)
	case lo.Known() && hi.Known():
		return "all within " + f(lo, prec) + "-" + f(hi, prec)
	case hi.Known():
		return "all <= " + f(hi, prec)
	case lo.Known():
		return "all > " + f(lo, prec)
	}
	return "all in one bucket"
}

// fw is f with the reason of an unknown value.
func fw(v Value, prec int, why string) string {
	if !v.Known() {
		return "- (" + why + ")"
	}
	return f(v, prec)
}

// dur is a duration in seconds with a unit that suits it.
func dur(v Value) string {
	if !v.Known() {
		return "-"
	}
	s := float64(v)
	switch {
	case s < 10:
		return fmt.Sprintf("%.2f s", s)
	case s < 600:
		return fmt.Sprintf("%.0f s", s)
	case s < 7200:
		return fmt.Sprintf("%.1f min", s/60)
	}
	return fmt.Sprintf("%.1f h", s/3600)
}

// absent prints an empty section's title with why it is empty.
func (t *textOut) absent(r *Report, section, title string) {
	if a := r.absent(section); a != nil {
		t.wrap("== "+title+": "+a.Why+" ", "("+a.Detail+")")
	}
}

func resets(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", counters reset %d time(s)", n)
}

func counts(m map[string]float64) string {
	if len(m) == 0 {
		return "-"
	}
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s %g", k, v))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func countsInt(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func cut(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "~"
}

func bytesH(v Value) string {
	if !v.Known() {
		return "-"
	}
	x := float64(v)
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for math.Abs(x) >= 1024 && i < len(units)-1 {
		x /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %s", x, units[i])
}

// textSections keeps the sections of a text report whose title starts
// with one of heads.
func textSections(text string, heads ...string) string {
	var b strings.Builder
	keep := false
	for _, l := range strings.SplitAfter(text, "\n") {
		if strings.HasPrefix(l, "== ") {
			keep = false
			for _, h := range heads {
				keep = keep || strings.HasPrefix(l, "== "+h)
			}
		}
		if keep {
			b.WriteString(l)
		}
	}
	return b.String()
}
