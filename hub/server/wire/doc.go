// Package wire is a gRPC server over HTTP/2 for many long-lived, mostly
// idle streams: the hub's edges, each with an uplink and a control stream
// that carry a message every few seconds. grpc-go gives every connection
// a reader, a writer and a keepalive goroutine and every stream a handler
// goroutine and its transport state: about 60 KB an edge, 600 MB for
// 10,000 edges. Here a connection is one goroutine, parked in a read of
// the next frame header (its stack shrinks to the minimum between
// frames), a decoder without a dynamic table, and the state of its
// streams; handlers are callbacks, not goroutines.
//
// # Model
//
// Server.Serve accepts connections. Each connection's goroutine does the
// TLS handshake, reads the client preface, sends the server's SETTINGS,
// and reads frames until the first stream's header block. If that
// stream's method has a Handler, the connection is the server's for good;
// otherwise it is handed to the Fallback listener with every byte read so
// far, and the grpc.Server serving that listener takes it from the
// preface on (with TLS, through PassthroughCredentials). So one port
// serves both: the edges' streams here, and the API, with all grpc-go
// offers, there. A connection handed off never comes back, and a
// connection served here serves only the methods with handlers: another
// method on it is Unimplemented.
//
// Frames are read and handled in order on the connection's goroutine.
// A request message is gathered from its DATA frames, decompressed
// (grpc-encoding, with grpc-go's registered compressors) and given to
// the stream's Receiver there, so a receiver that takes its time holds
// back its own connection, and its flow-control windows, and nothing
// else. Responses (Stream.Send) and ends (Stream.End) are queued and
// written, as the client's flow control allows, by the goroutine that
// queued them when it is the connection's, else by a writer goroutine
// that lives while there is something to write.
//
// # Invariants
//
//   - One writer at a time per connection (conn.writing), frames in the
//     order queued: a stream's headers, messages and trailers go out in
//     order, each within both windows.
//   - Every header block is decoded, also of a stream refused or reset,
//     so the HPACK state stays the client's.
//   - A stream's Receiver.Closed runs once, after its last Message or
//     CloseSend; its Context ends then.
//   - What a client announces is not allocated ahead: a message buffer
//     grows with the bytes received, up to MaxRecvMsgSize.
//
// # Caveats
//
//   - Only what gRPC clients use: no server push, no PRIORITY handling,
//     no HTTP/1.1 upgrade. Responses are never compressed (every client
//     takes uncompressed messages), and grpc-timeout is not applied: the
//     streams here last.
//   - The settings sent before the first stream (a 16 KB frame limit, the
//     stream window, no header table) are those grpc-go sends with the
//     hub's options, so a client of a connection handed off applies the
//     same settings twice. A fallback server with other options should
//     get a Config whose windows match.
//   - A client that opens streams faster than StreamRate past a burst of
//     StreamBurst (8 a second past 32; an edge opens two for a
//     connection's life) is told GOAWAY and closed: opening and resetting
//     streams without end would otherwise have the server authenticate
//     each ("rapid reset").
//   - Keepalive: a connection silent for KeepaliveTime is pinged and
//     closed if it stays silent for KeepaliveTimeout; clients that ping
//     more often than MinPingInterval get GOAWAY after two strikes, as
//     grpc-go's enforcement policy does.
package wire
