package archive

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// state is the archiver's durable state, stored by Log.Save (as JSON) in
// the same store as the log: the hub's bbolt file. It is small: a cursor,
// the work in progress, and per partition of the archive its current
// manifest generation and files.
type state struct {
	Format int    `json:"format"`
	LogID  string `json:"log"`
	// Cursor: every log entry at or below it is in a published manifest.
	Cursor uint64 `json:"cursor"`
	// Intent is the work begun and not yet committed, resumed as it was
	// planned after a crash.
	Intent     *intent               `json:"intent,omitempty"`
	Partitions map[string]*partState `json:"partitions"`
	GC         []gcItem              `json:"gc,omitempty"`
	Last       lastWork              `json:"last"`
	Totals     Totals                `json:"totals"`
}

const stateFormat = 1

// partState is one partition's current manifest.
type partState struct {
	Gen   uint64 `json:"gen"`
	Files []File `json:"files"`
	// Compacted is the generation that last compacted it (0: never).
	Compacted uint64 `json:"compacted,omitempty"`
}

// intent is one unit of work: an append of a log range, or a compaction.
type intent struct {
	Cause   string `json:"cause"`
	Created int64  `json:"created_ms"`
	// Append: the log range and the files and manifests it makes, with
	// the rows-per-file bound it was planned with (so a resumed build
	// names the same files).
	From        uint64       `json:"from,omitempty"`
	To          uint64       `json:"to,omitempty"`
	RowsPerFile int          `json:"rows_per_file,omitempty"`
	Parts       []intentPart `json:"parts,omitempty"`
	// Compact: the inputs, by schema, and the outputs.
	Partition string `json:"partition,omitempty"`
	Gen       uint64 `json:"gen,omitempty"`
	Inputs    []File `json:"inputs,omitempty"`
	Outputs   []File `json:"outputs,omitempty"`
	// Expired counts the rows of an append dropped for partitions past
	// the archive's retention.
	Expired uint64 `json:"expired,omitempty"`
	// Invalid counts the rows it set aside: not archivable (a key not in
	// the operators' encoding, values that do not fit their schema).
	Invalid uint64 `json:"invalid,omitempty"`
}

// intentPart is what an append adds to one partition.
type intentPart struct {
	Partition string `json:"partition"`
	Gen       uint64 `json:"gen"` // the generation it publishes
	Files     []File `json:"files"`
}

// gcItem is an object to delete once the hub's clock passes After.
type gcItem struct {
	Key   string `json:"key"`
	After int64  `json:"after_ms"`
}

// lastWork is what the status shows of the last manifests.
type lastWork struct {
	Manifest     string `json:"manifest,omitempty"`
	ManifestAt   int64  `json:"manifest_ms,omitempty"`
	Compaction   string `json:"compaction,omitempty"` // manifest key
	CompactionAt int64  `json:"compaction_ms,omitempty"`
	CompactedIn  int    `json:"compacted_files,omitempty"`
	CompactedRow int64  `json:"compacted_rows,omitempty"`
}

// Totals are the archive's counts since its log began (kept in the
// state, so they survive restarts).
type Totals struct {
	Rows        uint64 `json:"rows"`
	Files       uint64 `json:"files"`
	Bytes       uint64 `json:"bytes"`
	Manifests   uint64 `json:"manifests"`
	Compactions uint64 `json:"compactions"`
	Expired     uint64 `json:"expired_rows"`
	Deleted     uint64 `json:"deleted_partitions"`
	Invalid     uint64 `json:"invalid_rows"`
}

func (s *state) encode() []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return b
}

// decodeState decodes and checks a state. Errors match ErrCorrupt.
func decodeState(b []byte) (*state, error) {
	var s state
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("archive: state: %v: %w", err, ErrCorrupt)
	}
	if s.Format != stateFormat {
		return nil, fmt.Errorf("archive: state format %d, this hub reads %d: %w", s.Format, stateFormat, ErrCorrupt)
	}
	if !isHex16(s.LogID) {
		return nil, fmt.Errorf("archive: state: log id %q: %w", s.LogID, ErrCorrupt)
	}
	if s.Partitions == nil {
		s.Partitions = map[string]*partState{}
	}
	for k, p := range s.Partitions {
		if _, err := parsePartition(k); err != nil || p == nil {
			return nil, fmt.Errorf("archive: state: partition %q: %w", k, ErrCorrupt)
		}
	}
	if in := s.Intent; in != nil {
		switch {
		case in.Cause == causeAppend && (in.From != s.Cursor+1 || in.To < in.From || in.RowsPerFile <= 0):
			return nil, fmt.Errorf("archive: state: append intent [%d, %d] after cursor %d: %w", in.From, in.To, s.Cursor, ErrCorrupt)
		case in.Cause == causeCompact && s.Partitions[in.Partition] == nil:
			return nil, fmt.Errorf("archive: state: compaction of unknown partition %q: %w", in.Partition, ErrCorrupt)
		case in.Cause != causeAppend && in.Cause != causeCompact:
			return nil, fmt.Errorf("archive: state: intent cause %q: %w", in.Cause, ErrCorrupt)
		}
	}
	return &s, nil
}

// partitionKeys returns the partitions in order.
func (s *state) partitionKeys() []string {
	ks := make([]string, 0, len(s.Partitions))
	for k := range s.Partitions {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
