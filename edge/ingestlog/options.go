package ingestlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// SyncPolicy says when the committer fsyncs.
type SyncPolicy uint8

const (
	// SyncGroup (the default) writes and fsyncs a batch when GroupBytes are
	// buffered or the oldest buffered record has waited GroupDelay,
	// whichever comes first.
	SyncGroup SyncPolicy = iota
	// SyncAlways writes and fsyncs as soon as anything is buffered, without
	// waiting for company. Records appended while an fsync is running share
	// the next one; an appender that waits for each record gets one fsync
	// per record.
	SyncAlways
	// SyncNever writes like SyncAlways and never fsyncs: "durable" then
	// means "handed to the kernel". For tests and benchmarks only; after a
	// power loss, Open may truncate or report corruption.
	SyncNever
)

func (p SyncPolicy) String() string {
	switch p {
	case SyncGroup:
		return "group"
	case SyncAlways:
		return "always"
	case SyncNever:
		return "never"
	}
	return fmt.Sprintf("SyncPolicy(%d)", uint8(p))
}

// Compression says whether blocks are compressed.
type Compression uint8

const (
	// CompressionNone (the default) stores blocks as they are.
	CompressionNone Compression = iota
	// CompressionZstd compresses each block (one group commit) as one zstd
	// frame at the fastest level, and keeps it only when it saves at least
	// an eighth of the bytes. A Reader reads both kinds whatever this says.
	CompressionZstd
)

func (c Compression) String() string {
	switch c {
	case CompressionNone:
		return "none"
	case CompressionZstd:
		return "zstd"
	}
	return fmt.Sprintf("Compression(%d)", uint8(c))
}

// Defaults for the zero fields of Options.
const (
	DefaultSegmentSize   = 64 << 20
	DefaultSpareSegments = 1
	DefaultMaxRecordSize = 1 << 20
	DefaultGroupBytes    = 1 << 20
	DefaultGroupDelay    = 2 * time.Millisecond
	DefaultMaxUnsynced   = 4 << 20

	// MinSegmentSize is the smallest SegmentSize Validate accepts.
	MinSegmentSize = 1 << 10
)

// Options configure a Log. A zero field means its default; nil *Options
// means all defaults.
type Options struct {
	// FS is the filesystem; nil means OSFS().
	FS FS
	// SegmentSize is the size at which the log starts a new segment file.
	// A segment holds at least one frame, so one larger than SegmentSize
	// makes a larger segment.
	SegmentSize int64
	// SpareSegments is how many deleted segments' files the log keeps to
	// write the next segments over (renamed <name>.free; Size counts them,
	// DropSpares removes them): an fsync that overwrites blocks the file
	// has costs the file system no allocation and no journal commit. 0
	// means DefaultSpareSegments; negative, none.
	SpareSegments int
	// MaxRecordSize is the longest record Append accepts.
	MaxRecordSize int
	// Sync is the fsync policy.
	Sync SyncPolicy
	// GroupBytes: under SyncGroup, a batch is committed as soon as this many
	// record bytes are buffered.
	GroupBytes int
	// GroupDelay: under SyncGroup, the longest a record waits in the buffer
	// before its batch is committed.
	GroupDelay time.Duration
	// MaxUnsynced bounds the record bytes appended but not yet durable
	// (buffered plus being written). Append blocks while one more record
	// would exceed it: the back-pressure that stops the MQTT handler, and
	// with it the acks to the broker. It is also the largest block, so it
	// must not exceed MaxBlockSize. Default: the largest of 4 MiB,
	// GroupBytes and one record of MaxRecordSize.
	MaxUnsynced int
	// Compression of blocks.
	Compression Compression
	// First is the position of the first record of a log Open creates
	// (one whose directory holds no segment): a log that continues one
	// whose records are gone, as when an edge is restored from a snapshot
	// that covers the records before First. An existing log ignores it.
	First Position
	// OnDurable, when set, is called by the committer goroutine after every
	// commit with the new durable end: every record with a position below
	// upTo is durable. Calls come in order, one at a time, with upTo
	// increasing. It must return quickly (the next commit waits for it) and
	// must not call Append, which may wait for the committer, or Close.
	OnDurable func(upTo Position)
}

// withDefaults returns a copy of o with every zero field set to its default.
func (o *Options) withDefaults() Options {
	var d Options
	if o != nil {
		d = *o
	}
	if d.FS == nil {
		d.FS = OSFS()
	}
	if d.SegmentSize == 0 {
		d.SegmentSize = DefaultSegmentSize
	}
	if d.MaxRecordSize == 0 {
		d.MaxRecordSize = DefaultMaxRecordSize
	}
	switch {
	case d.SpareSegments == 0:
		d.SpareSegments = DefaultSpareSegments
	case d.SpareSegments < 0:
		d.SpareSegments = 0
	}
	if d.GroupBytes == 0 {
		d.GroupBytes = DefaultGroupBytes
	}
	if d.GroupDelay == 0 {
		d.GroupDelay = DefaultGroupDelay
	}
	if d.MaxUnsynced == 0 {
		d.MaxUnsynced = max(DefaultMaxUnsynced, d.GroupBytes, d.MaxRecordSize+binary.MaxVarintLen64)
	}
	return d
}

// Validate reports every problem with o at once, after defaults are applied.
func (o *Options) Validate() error {
	d := o.withDefaults()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("ingestlog: options: "+format, args...))
	}
	if d.SegmentSize < MinSegmentSize {
		bad("SegmentSize %d below the minimum %d", d.SegmentSize, MinSegmentSize)
	}
	if d.MaxRecordSize < 0 {
		bad("MaxRecordSize %d is negative", d.MaxRecordSize)
	}
	if d.GroupBytes < 0 {
		bad("GroupBytes %d is negative", d.GroupBytes)
	}
	if d.GroupDelay < 0 {
		bad("GroupDelay %v is negative", d.GroupDelay)
	}
	switch {
	case d.MaxUnsynced < 0:
		bad("MaxUnsynced %d is negative", d.MaxUnsynced)
	case d.MaxUnsynced > MaxBlockSize:
		bad("MaxUnsynced %d above MaxBlockSize %d", d.MaxUnsynced, MaxBlockSize)
	}
	if d.MaxRecordSize > 0 && d.MaxRecordSize+binary.MaxVarintLen64 > d.MaxUnsynced {
		bad("MaxRecordSize %d does not fit in MaxUnsynced %d (with its %d-byte length prefix)", d.MaxRecordSize, d.MaxUnsynced, binary.MaxVarintLen64)
	}
	if d.GroupBytes > d.MaxUnsynced {
		bad("GroupBytes %d above MaxUnsynced %d: the batch would never fill", d.GroupBytes, d.MaxUnsynced)
	}
	if d.Sync > SyncNever {
		bad("unknown Sync policy %d", d.Sync)
	}
	if d.Compression > CompressionZstd {
		bad("unknown Compression %d", d.Compression)
	}
	return errors.Join(errs...)
}
