// Package wire is a gRPC server over HTTP/2 for many long-lived, mostly
// idle streams: the hub's edges, each with an uplink and a control stream
// that carry a message every few seconds. grpc-go gives every connection
// a reader, a writer and a keepalive goroutine and every stream a handler
// goroutine and its transport state: about 60 KB an edge, 600 MB for
// 10,000 edges. Here a connection is one goroutine, parked in a read of
// the next frame header (its stack shrinks to the minimum between
// frames), or, on Linux, an entry in an epoll set (below);
// a decoder without a dynamic table, and the state of its streams;
// handlers are callbacks, not goroutines.
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
// # The poller (Linux)
//
// A goroutine parked in a read costs a wake-up of the Go scheduler, and
// a read that finds nothing, for every frame: at 10,000 edges that was
// most of the hub's CPU. So on Linux a connection, once its first
// stream is known to be the server's, leaves its goroutine: its
// socket is dup'ed out of Go's poller into an epoll set of the server's
// own (edge-triggered), and the net.Conn closed. One goroutine waits on
// the set; after each look that found events it sleeps PollDelay, so the
// next look takes what many connections sent meanwhile. Each connection
// with something to read goes to a worker, which reads until a read
// leaves room in the buffer (the socket had no more: its next bytes are
// the next event) and handles every whole frame, running the handlers
// itself; a connection is with one worker at a time (conn.state: the
// poller's word that came while a worker had it makes the worker read
// once more). A frame is handled once it is whole in the connection's
// buffer: 512 bytes, or a pooled 16 KB while a longer frame is partly
// read. Writes never wait: what the socket does not take stays queued,
// the connection's writer waits for the poller's word that the socket
// has room, and the keepalive sweep closes a connection whose socket
// took nothing for WriteTimeout. A TLS connection does the same through
// a net.Conn of its own (tlsSocket), the socket until then and the
// dup'ed descriptor after: a read that finds nothing is a temporary
// error (errPollAgain), and a write seals into the writer's buffer.
// Every connection keeps its goroutine elsewhere, or with PollDelay
// negative.
//
// # TLS records
//
// crypto/tls does the handshake. Once the first stream's method has a
// handler, a TLS 1.3 connection's records are the server's own
// (tlsRecords, RFC 8446 section 5), because a tls.Conn keeps the
// buffers it grew for life (golang/go#43563): its ClientHello's and its
// largest record's, 4–33 KB a connection. The records hold two AEADs,
// and a pooled buffer only while a record is partly read. The traffic
// secrets come from the handshake's key log (each connection's own
// Config, from GetConfigForClient); the sequence numbers from counting
// the records the tls.Conn read and wrote, which tlsSocket hands it one
// at a time so that it holds no part of one; what it opened and nobody
// read comes first. The listener sends no session ticket (crypto/tls
// would seal it during the handshake, uncounted). A peer's KeyUpdate
// moves the read key (and, asked, the write key after ours); the
// server updates its own key every 2^24 records. TLS 1.2 connections,
// and connections handed off, stay the tls.Conn's (Stats.TLSRecords
// counts the others).
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
