// Package jsonfield turns an MQTT JSON payload into the few fields a
// pipeline uses, in one pass over the bytes and without allocating.
//
// # Model
//
// An Extractor is built once per pipeline from dotted paths ("device",
// "ts", "meta.site"). The paths form a small trie of object keys. Extract
// walks the document once: keys that lead into the trie are followed, every
// other value is skipped, and each wanted value is reported as a Value, a
// Kind plus the bytes that spell it. Numbers stay as their literal until the
// caller asks for Float or Int, so a field that is only hashed or compared
// is never converted.
//
// A path addresses object keys only. There is no array indexing, and a key
// containing a dot cannot be named. A path that runs into an array, a
// string or any other non-object yields Missing, as does an absent key.
// A path may name an object ("meta") and reach into it ("meta.site") at the
// same time; the object's Value is its raw JSON text.
//
// # Invariants
//
//   - The whole document is validated against RFC 8259 even after every
//     wanted field has been found. A malformed document is an error and no
//     value from it is returned (out is reset to Missing), so a half-parsed
//     record never reaches a window: it goes to the dead-letter output.
//   - The top-level value must be an object.
//   - Duplicate keys: the last occurrence wins, as in encoding/json. When a
//     key on a path repeats, its earlier value is forgotten whole, so
//     {"m":{"a":1},"m":{"b":2}} gives Missing for "m.a".
//   - Strings must be valid UTF-8. encoding/json silently replaces invalid
//     bytes with U+FFFD; a payload with broken encoding is more likely a
//     corrupt frame than a sensor reading, so Extract rejects it (the
//     record goes to the dead-letter output with the byte offset). A \u
//     escape of an unpaired surrogate (\ud800) is valid JSON grammar and
//     becomes U+FFFD, as in encoding/json.
//   - Nesting deeper than MaxDepth (256) is rejected, so a payload like
//     [[[[... cannot exhaust the stack. encoding/json allows 10000.
//   - Work is linear in the document size: one pass, no backtracking, key
//     lookup in a short list or a map, no copying except to unescape a
//     wanted string.
//   - Steady state allocates nothing: values alias the document, and
//     unescaped strings go to a scratch buffer that Extract reuses.
//
// Every rejection is a *SyntaxError (Offset and a short reason) matching
// errors.Is(err, ErrSyntax).
//
// # Numbers
//
// Value.Float is exact: it returns what strconv.ParseFloat returns. Plain
// integers and decimals with at most 2^53 in the mantissa and a power of ten
// up to 22 take a fast path (one IEEE multiply or divide, correctly
// rounded); the rest go to strconv without allocating. Value.Int works on
// the decimal literal, so 9007199254740993 is exact and 1.7e12 is an
// integer, while 1.5 fails with ErrNotInteger and 2^63 with ErrRange.
//
// # Caveats
//
//   - Values alias the document and the Extractor's scratch buffer: they
//     are valid only until the next Extract, and only while doc is
//     unchanged. Copy what must outlive the record.
//   - An Extractor is not safe for concurrent use; Clone one per worker.
//   - Keys are compared after unescaping, byte for byte, with no Unicode
//     normalisation: "caf\u00e9" matches the path "café" only when both use
//     the same code points.
//   - A number is only checked against the JSON grammar during Extract;
//     1e400 is valid JSON and fails later, in Float, with ErrRange.
package jsonfield
