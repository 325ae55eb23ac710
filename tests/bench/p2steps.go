package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// stepsRE is the prolog's debug line of its start's steps (helper/callbacks
// Prolog): "job N: start steps on NODE in ms: prolog a 1, b 2; supervisor c 3, ...".
var stepsRE = regexp.MustCompile(`gym-otel: job (\d+): start steps on \S+ in ms: prolog (.*); supervisor (.*)$`)

// startSteps is P2's row of where the start's time goes: the median of
// each step, in ms, over the jobs ids of lines (one node's slurmd log).
// The supervisor's steps are part of the prolog's "supervisor" step.
func startSteps(lines []logLine, ids []string, what string) Row {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var order []string
	ms := map[string][]float64{}
	n := 0
	for _, l := range lines {
		m := stepsRE.FindStringSubmatch(l.text)
		if m == nil || !want[m[1]] {
			continue
		}
		n++
		for i, part := range []string{m[2], m[3]} {
			for _, step := range strings.Split(part, ", ") {
				name, v, ok := strings.Cut(step, " ")
				f, err := strconv.ParseFloat(v, 64)
				if !ok || err != nil {
					continue
				}
				if i == 1 {
					name = "sup." + name
				}
				if _, seen := ms[name]; !seen {
					order = append(order, name)
				}
				ms[name] = append(ms[name], f)
			}
		}
	}
	var parts []string
	for _, name := range order {
		parts = append(parts, fmt.Sprintf("%s %.0f", name, median(ms[name])))
	}
	fig := strings.Join(parts, ", ")
	if n == 0 {
		fig = "no step lines (slurmd below debug, or no ready collector)"
	}
	return Row{ID: "P2", What: "the start's steps on the batch node, " + what + ", flag on (ms, median; sup.* within supervisor)",
		Figure: fig, Spread: fmt.Sprintf("%d jobs", n), Target: "-", Met: "-"}
}
