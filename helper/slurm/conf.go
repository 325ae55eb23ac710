package slurm

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
)

// ConfMax bounds what ReadConf reads of a slurm.conf, bytes.
const ConfMax = 1 << 20

// Conf is the top-level keys of a slurm.conf: each key lower-cased (Slurm's
// keys are case-insensitive), its last value.
type Conf map[string]string

// Get returns key's value (any case) and whether the file set it.
func (c Conf) Get(key string) (string, bool) {
	v, ok := c[strings.ToLower(key)]
	return v, ok
}

// confKeyValue is Slurm's key=value pattern (src/common/parse_config.c,
// keyvalue_pattern, the same in 22.05 to 26.05): spaces allowed around
// "=", an operator before it ("+=", "-=", ...), a value in double quotes
// with spaces, else up to the next space.
var confKeyValue = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[[:space:]]*([[:alnum:]_.]+)[[:space:]]*[-*+/]?=[[:space:]]*(?:"([^"]*)"|([^[:space:]]+))(?:[[:space:]]|$)`)
})

// ReadConf reads the slurm.conf at path as Slurm's parser reads its lines
// (every key=value pair of a line, a "#" not escaped by a backslash starts
// a comment, "\#" is a "#"), bounded to ConfMax bytes. Include files are
// not followed. Errors: the file's.
func ReadConf(path string) (Conf, error) {
	f, err := os.Open(filepath.Clean(path))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseConf(io.LimitReader(f, ConfMax))
}

func parseConf(r io.Reader) (Conf, error) {
	c := Conf{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), ConfMax)
	for sc.Scan() {
		line := stripConfComment(sc.Text())
		for {
			m := confKeyValue().FindStringSubmatchIndex(line)
			if m == nil {
				break
			}
			var v string
			if m[4] >= 0 { // quoted
				v = line[m[4]:m[5]]
			} else {
				v = line[m[6]:m[7]]
			}
			c[strings.ToLower(line[m[2]:m[3]])] = v
			line = line[m[1]:]
		}
	}
	return c, sc.Err()
}

// stripConfComment cuts line at its first "#" not escaped by an odd number
// of backslashes, and turns each "\#" before it into "#".
func stripConfComment(line string) string {
	bs := 0
	for i := 0; i < len(line); i++ {
		switch line[i] {
		case '\\':
			bs++
			continue
		case '#':
			if bs%2 == 0 {
				line = line[:i]
			}
		}
		bs = 0
	}
	return strings.ReplaceAll(line, `\#`, "#")
}
