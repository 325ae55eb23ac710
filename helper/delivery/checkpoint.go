package delivery

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/atomicfile"
)

// CheckpointFile is the checkpoint's name in a node dir, beside
// receipt.json.
const CheckpointFile = "delivery.json"

// HeadMax is the most bytes of a file's start the checkpoint hashes
// (Position.Head).
const HeadMax = 4096

// CheckpointVersion is the format version a checkpoint carries.
const CheckpointVersion = 1

// Checkpoint is the backend's acknowledged position in each of a node
// dir's jsonl files, and what the deliveries counted on the way. It is
// written whole (atomicfile) after every request the backend answered,
// so a restarted sender (or replay) continues where the backend's last
// answer left it.
type Checkpoint struct {
	// Version is CheckpointVersion.
	Version int `json:"version"`
	// Files holds the position of each jsonl file, by its name in the
	// node dir ("traces.jsonl").
	Files map[string]*Position `json:"files"`
	// ResourceAttributes names the attributes a sender added to every
	// resource it sent (Options.ResourceAttributes; never their values):
	// ["Authorization"] with otel.token_resource_attribute, so that
	// `replay` adds the token as the job's own delivery did.
	ResourceAttributes []string `json:"resource_attributes,omitempty"`
}

// Position is how far the backend has answered for one jsonl file, and
// the totals of every delivery of it.
type Position struct {
	// Offset is the byte offset, at a line's start, before which every
	// line was answered by the backend with 2xx (its items accepted, or
	// rejected by a partial success) or refused for good (a 4xx other
	// than the configuration errors, or 500/501: counted in Rejected).
	Offset int64 `json:"offset"`
	// Dev and Ino identify the file the offset is in (0: not yet known):
	// a file replaced or truncated under the checkpoint is an error, not
	// a position.
	Dev uint64 `json:"dev,omitempty"`
	Ino uint64 `json:"ino,omitempty"`
	// Head is the SHA-256 (hex) of the file's first HeadLen bytes (at
	// most HeadMax, never past Offset): a file removed and written anew
	// may get the old inode, but not the old first lines.
	Head    string `json:"head,omitempty"`
	HeadLen int64  `json:"head_len,omitempty"`
	// Lines counts the lines before Offset; BadLines those of them that
	// were not an OTLP-JSON object (not sent).
	Lines    int64 `json:"lines"`
	BadLines int64 `json:"bad_lines,omitempty"`
	// Items counts the items (spans, metric data points, log records) of
	// the lines before Offset; Accepted those the backend took, Rejected
	// those it refused (a partial success's rejected count, or a whole
	// request refused for good). Accepted + Rejected = Items.
	Items    int64 `json:"items"`
	Accepted int64 `json:"accepted"`
	Rejected int64 `json:"rejected"`
	// Requests counts the requests sent (retries included); Retries those
	// sent again after a failure.
	Requests int64 `json:"requests"`
	Retries  int64 `json:"retries"`
	// DuplicatesBound is an upper bound of the items the backend may hold
	// twice: the items of every request sent again after an attempt whose
	// outcome was unknown (a timeout, a connection reset after the
	// request was written), which the backend may have stored.
	DuplicatesBound int64 `json:"duplicates_bound"`
	// InFlight is the items of a request a sender had sent, or was about
	// to send, without an answer when the checkpoint was written (0:
	// none): written before each attempt, cleared once the attempt is
	// answered or its unknown outcome counted in DuplicatesBound. A sender
	// that finds it set (the previous one died, or was stopped with the
	// request in flight) adds it to DuplicatesBound: the backend may have
	// stored that request, and its lines are past Offset, to be sent again.
	InFlight int64 `json:"in_flight,omitempty"`
	// AckedAt is when the backend last answered for this file (RFC 3339,
	// zero before any answer).
	AckedAt time.Time `json:"acked_at,omitzero"`
}

// ReadCheckpoint reads dir's checkpoint. A dir without one has an empty
// checkpoint (nothing acknowledged). Errors: the file is unreadable, not
// JSON, or of another version (named).
func ReadCheckpoint(dir string) (*Checkpoint, error) {
	path := filepath.Join(dir, CheckpointFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &Checkpoint{Version: CheckpointVersion, Files: map[string]*Position{}}, nil
	}
	if err != nil {
		return nil, err
	}
	var c Checkpoint
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%s: not a delivery checkpoint: %w", path, err)
	}
	if c.Version != CheckpointVersion {
		return nil, fmt.Errorf("%s: version %d, this program reads version %d", path, c.Version, CheckpointVersion)
	}
	if c.Files == nil {
		c.Files = map[string]*Position{}
	}
	return &c, nil
}

// Write writes the checkpoint to dir whole (a reader sees the old one or
// the new one). Errors: the file system's.
func (c *Checkpoint) Write(dir string) error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, CheckpointFile), append(data, '\n'), 0o600)
}

// position is the checkpoint's position of file name, made when absent.
func (c *Checkpoint) position(name string) *Position {
	p := c.Files[name]
	if p == nil {
		p = &Position{}
		c.Files[name] = p
	}
	return p
}
