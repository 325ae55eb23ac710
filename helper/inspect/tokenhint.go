package inspect

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
)

// tokenLogTail is how much of collector.log's end tokenHint reads.
const tokenLogTail = 1 << 20

var (
	// statusRE is the backend's answer in the OTLP/HTTP exporter's
	// error, as the collector logs it ("... responded with HTTP Status
	// Code 401, Message=...").
	statusRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`responded with HTTP Status Code (40[13])\b`) })
	// tokenVarRE is the variable the backend exporter's bearer token
	// comes from in collector.yaml (the submit's otel.token_env).
	tokenVarRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`Authorization: Bearer \$\{env:([A-Za-z_][A-Za-z0-9_]*)\}`)
	})
)

// tokenHint is what to check when a node dir's collector had exports
// refused with 401 or 403 (the last such status in the end of its
// collector.log): the job's bearer token, by the variable the submit read
// it from (collector.yaml's backend header). "" when the receipt counts no
// send failure or the log names neither status.
func tokenHint(dir string, rc *receipt.Receipt) string {
	failed := false
	for _, c := range rc.Signals {
		failed = failed || c.SendFailed > 0
	}
	if !failed {
		return ""
	}
	f, err := os.Open(filepath.Join(dir, jobdir.LogFile))
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > tokenLogTail {
		_, _ = f.Seek(fi.Size()-tokenLogTail, io.SeekStart)
	}
	data, _ := io.ReadAll(io.LimitReader(f, tokenLogTail))
	m := statusRE().FindAllSubmatch(data, -1)
	if len(m) == 0 {
		return ""
	}
	status, _ := strconv.Atoi(string(m[len(m)-1][1]))
	variable := "the token variable (otel.token_env)"
	if cfg, err := os.ReadFile(filepath.Join(dir, jobdir.ConfigFile)); err == nil {
		if v := tokenVarRE().FindSubmatch(cfg); v != nil {
			variable = fmt.Sprintf("$%s (otel.token_env)", v[1])
		}
	}
	if status == 401 {
		return fmt.Sprintf("the backend answered HTTP 401 (collector.log): it did not accept the job's bearer token, which the submit read from %s: check that it is this backend's token and not expired; `gym-otel-spank replay DIR` with the right one there sends the files", variable)
	}
	return fmt.Sprintf("the backend answered HTTP 403 (collector.log): it accepted no data from the job's bearer token, which the submit read from %s: check that token's rights on this backend; `gym-otel-spank replay DIR` sends the files", variable)
}
