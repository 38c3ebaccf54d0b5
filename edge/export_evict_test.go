package edge

// EncodeRecord encodes an ingest log message record, for the external
// tests that write a data directory's log themselves.
var EncodeRecord = encodeRecord
