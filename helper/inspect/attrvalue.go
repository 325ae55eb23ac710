package inspect

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// AttrValue is one value of a resource attribute as the files typed it
// (OTLP's stringValue, intValue, doubleValue or boolValue). In --json it
// is that JSON type: a string, a number or true/false, so that jq reads
// slurm_job_restart_count 0 as the number 0; the text report writes an
// int as "0 (int)", telling it from the string "0".
type AttrValue struct {
	// Text is the value as written: the string, the decimal integer, the
	// shortest decimal of the double, "true" or "false".
	Text string
	// Kind is "string", "int", "double" or "bool".
	Kind string
}

// attrValue is v with its OTLP type, or false when v holds none.
func attrValue(v anyValue) (AttrValue, bool) {
	switch {
	case v.StringValue != nil:
		return AttrValue{Text: *v.StringValue, Kind: "string"}, true
	case v.IntValue != nil:
		return AttrValue{Text: *v.IntValue, Kind: "int"}, true
	case v.DoubleValue != nil:
		return AttrValue{Text: strconv.FormatFloat(*v.DoubleValue, 'g', -1, 64), Kind: "double"}, true
	case v.BoolValue != nil:
		return AttrValue{Text: strconv.FormatBool(*v.BoolValue), Kind: "bool"}, true
	}
	return AttrValue{}, false
}

// String is the text report's form: Text, with " (int)" after an int.
func (a AttrValue) String() string {
	if a.Kind == "int" {
		return a.Text + " (int)"
	}
	return a.Text
}

// MarshalJSON writes a string as a JSON string, an int or a finite double
// as a JSON number and a bool as true or false; an int or double whose
// text is not a JSON number (a non-finite double) is written as a string.
func (a AttrValue) MarshalJSON() ([]byte, error) {
	switch a.Kind {
	case "int":
		if _, err := strconv.ParseInt(a.Text, 10, 64); err == nil {
			return []byte(a.Text), nil
		}
		if _, err := strconv.ParseUint(a.Text, 10, 64); err == nil {
			return []byte(a.Text), nil
		}
	case "double":
		if f, err := strconv.ParseFloat(a.Text, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return []byte(strconv.FormatFloat(f, 'g', -1, 64)), nil
		}
	case "bool":
		if a.Text == "true" || a.Text == "false" {
			return []byte(a.Text), nil
		}
	}
	return json.Marshal(a.Text)
}

// UnmarshalJSON reads what MarshalJSON writes: a string, a number (an
// int when it has no fraction or exponent, else a double) or a boolean.
func (a *AttrValue) UnmarshalJSON(b []byte) error {
	s := strings.TrimSpace(string(b))
	switch {
	case strings.HasPrefix(s, `"`):
		a.Kind = "string"
		return json.Unmarshal(b, &a.Text)
	case s == "true" || s == "false":
		*a = AttrValue{Text: s, Kind: "bool"}
		return nil
	}
	if _, err := strconv.ParseInt(s, 10, 64); err == nil {
		*a = AttrValue{Text: s, Kind: "int"}
		return nil
	}
	if _, err := strconv.ParseUint(s, 10, 64); err == nil {
		*a = AttrValue{Text: s, Kind: "int"}
		return nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		*a = AttrValue{Text: strconv.FormatFloat(f, 'g', -1, 64), Kind: "double"}
		return nil
	}
	return fmt.Errorf("an attribute value is a string, a number or a boolean, not %s", s)
}

// Texts is each value's text (Text, without the type), in order.
func Texts(vs []AttrValue) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Text
	}
	return out
}

// textForms is each value in the text report's form (String), in order.
func textForms(vs []AttrValue) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.String()
	}
	return out
}
