package replay

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
)

// DialTimeout bounds the check that the backend can be reached at all,
// before the collector starts.
const DialTimeout = 3 * time.Second

// CheckEndpoint refuses an endpoint the collector's exporter cannot use:
// not an absolute http:// or https:// URL with a host. flagName names the
// flag or setting it came from.
func CheckEndpoint(flagName, endpoint string) error {
	if endpoint == "" {
		return fmt.Errorf("%s: empty: give the backend's OTLP/HTTP URL, e.g. https://otlp.example.com:4318", flagName)
	}
	if !strings.Contains(endpoint, "://") {
		return fmt.Errorf("%s %q: no scheme: the OTLP/HTTP exporter needs a URL, e.g. https://%s (http:// for a backend without TLS)", flagName, endpoint, endpoint)
	}
	u, err := url.Parse(endpoint)
	switch {
	case err != nil:
		return fmt.Errorf("%s %q: not a URL (%v): give e.g. https://otlp.example.com:4318", flagName, endpoint, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%s %q: the scheme %q is not http or https: the OTLP/HTTP exporter needs e.g. https://%s", flagName, endpoint, u.Scheme, u.Host+u.Path)
	case u.Host == "":
		return fmt.Errorf("%s %q: no host: give e.g. https://otlp.example.com:4318", flagName, endpoint)
	}
	return nil
}

// Reachable reports an error when nothing answers a TCP connection at the
// endpoint's host and port within timeout (connection refused, no such
// host, no route): then no export can succeed, and replay stops before it
// starts the collector.
func Reachable(endpoint string, timeout time.Duration) error {
	u, err := url.Parse(endpoint)
	if err != nil {
		return err
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort(u.Hostname(), port), timeout)
	if err != nil {
		return fmt.Errorf("the backend %s cannot be reached: %v (nothing was sent; the files are unchanged: replay again when it is up, or give --endpoint)", endpoint, err)
	}
	return c.Close()
}

// preflight runs before the collector starts: the endpoint must be a URL
// the exporter takes and its host must accept a connection. A collector
// binary that is not there is left to the start's error.
func preflight(endpoint, binary string, dial time.Duration) error {
	if err := CheckEndpoint("--endpoint (or the job's otel.endpoint)", endpoint); err != nil {
		return err
	}
	if _, err := exec.LookPath(binary); err != nil {
		return nil
	}
	return Reachable(endpoint, dial)
}

// statusRE finds the HTTP status in the OTLP/HTTP exporter's error.
var statusRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?i)HTTP Status Code (\d{3})`) })

// HTTPStatus is the HTTP status the backend answered with in a Cause
// (0: none named: no answer, a timeout, a refused connection).
func HTTPStatus(cause string) int {
	m := statusRE().FindStringSubmatch(cause)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// exportFailures reads the backend exporter's failures in the
// collector's log: each failed attempt (retried or dropped) is one line
// with an "error" field. last is the last one in one line of at most 300
// characters: the log message and its "error" field, without the resource
// and other fields the line carries ("" when the log has none). answered
// counts the failures the backend answered with an HTTP status (it
// refused the data: 401, 413, 429, 503, ...); silent counts those it did
// not answer at all (a request that timed out, a connection refused,
// reset or not made: no HTTP status).
func exportFailures(logPath string) (last string, answered, silent int) {
	f, err := os.Open(logPath)
	if err != nil {
		return "", 0, 0
	}
	defer f.Close()
	cause := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, render.BackendExporter) {
			continue
		}
		i := strings.Index(line, "\t{")
		if i < 0 {
			continue
		}
		var fields map[string]any
		if json.Unmarshal([]byte(line[i+1:]), &fields) != nil {
			continue
		}
		e, _ := fields["error"].(string)
		if e == "" {
			continue
		}
		if HTTPStatus(e) != 0 {
			answered++
		} else {
			silent++
		}
		msg := line[:i]
		if j := strings.LastIndexByte(msg, '\t'); j >= 0 {
			msg = msg[j+1:]
		}
		// The exporter's advice without retries and queue ("Try enabling
		// retry_on_failure ...") would push the backend's answer out of
		// the one line.
		msg = adviceRE().ReplaceAllString(msg, "")
		cause = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(msg), ".") + ": " + e)
	}
	return oneLine(cause, 300), answered, silent
}

// exportCause is the backend exporter's last failure in the collector's
// log, in one line (exportFailures).
func exportCause(logPath string) string {
	c, _, _ := exportFailures(logPath)
	return c
}

// adviceRE matches the exporter's advice sentences in its failure message.
var adviceRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\s*Try enabling [^.]*\.`) })

// oneLine joins s's lines and cuts it to n bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n-3] + "..."
	}
	return s
}

// pending is the items the backend exporter had neither sent nor failed
// (-1 when unknown: receivers refused some, so the exporter's total is not
// known).
func (t *Totals) pending() int64 {
	if t.Refused > 0 {
		return -1
	}
	return max(0, t.Exported-t.Sent-t.SendFailed-t.EnqueueFailed)
}

// unread is the items the file receivers had not yet read.
func (t *Totals) unread() int64 { return max(0, t.Items-t.Accepted-t.Refused) }
