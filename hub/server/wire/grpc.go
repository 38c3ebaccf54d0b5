package wire

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The gRPC protocol over HTTP/2 (grpc/doc/PROTOCOL-HTTP2.md): a request is
// a POST with content-type application/grpc, each message a 5-byte prefix
// (a compressed flag and a big-endian length) and its bytes, and the
// response ends with trailers carrying grpc-status, grpc-message and, for
// errors with details, grpc-status-details-bin (a google.rpc.Status,
// base64 without padding).

const msgPrefixLen = 5

// Header blocks are encoded without the dynamic table (every field a
// "never indexed" literal, RFC 7541 section 6.2.3), so they carry no
// state between blocks and one encoder serves every connection.
var encoders = sync.Pool{New: func() any {
	e := &blockEncoder{}
	e.enc = hpack.NewEncoder(&e.buf)
	return e
}}

type blockEncoder struct {
	buf bytes.Buffer
	enc *hpack.Encoder
}

// encodeBlock encodes fields (name, value pairs) as a header block.
func encodeBlock(fields ...string) []byte {
	e := encoders.Get().(*blockEncoder)
	e.buf.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		_ = e.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1], Sensitive: true})
	}
	b := bytes.Clone(e.buf.Bytes())
	encoders.Put(e)
	return b
}

// responseHeaders is the header block of every response's first HEADERS:
// messages are sent uncompressed, which every gRPC client takes.
var responseHeaders = encodeBlock(":status", "200", "content-type", "application/grpc")

// trailerBlock encodes st as trailers; trailersOnly adds the response
// headers, for a stream that ends before it sent any message.
func trailerBlock(st *status.Status, trailersOnly bool) []byte {
	fields := make([]string, 0, 10)
	if trailersOnly {
		fields = append(fields, ":status", "200", "content-type", "application/grpc")
	}
	fields = append(fields, "grpc-status", strconv.Itoa(int(st.Code())))
	if m := st.Message(); m != "" {
		fields = append(fields, "grpc-message", encodeGrpcMessage(m))
	}
	if p := st.Proto(); len(p.GetDetails()) > 0 {
		if b, err := proto.Marshal(p); err == nil {
			fields = append(fields, "grpc-status-details-bin", base64.RawStdEncoding.EncodeToString(b))
		}
	}
	return encodeBlock(fields...)
}

// encodeGrpcMessage percent-encodes a status message as the gRPC
// protocol asks: every byte outside printable ASCII, and '%'.
func encodeGrpcMessage(m string) string {
	clean := true
	for i := 0; i < len(m); i++ {
		if c := m[i]; c < 0x20 || c > 0x7e || c == '%' {
			clean = false
			break
		}
	}
	if clean {
		return m
	}
	var b strings.Builder
	for i := 0; i < len(m); i++ {
		if c := m[i]; c < 0x20 || c > 0x7e || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// request is what a stream's HEADERS say.
type request struct {
	method   string // :path
	encoding string // grpc-encoding; "" or identity: none
	md       metadata.MD
}

// reservedHeader reports whether a request header is the protocol's
// rather than the caller's metadata (grpc-go leaves these out too).
func reservedHeader(name string) bool {
	switch name {
	case "content-type", "user-agent", "te", "grpc-encoding", "grpc-accept-encoding", "grpc-timeout",
		"grpc-message-type", "grpc-status", "grpc-message", "grpc-status-details-bin", "connection":
		return true
	}
	return false
}

// parseRequest checks a request's header fields and gathers its metadata.
// The error is the stream's status.
func parseRequest(fields []hpack.HeaderField) (request, error) {
	var r request
	var method, contentType string
	for _, f := range fields {
		switch {
		case f.Name == ":method":
			method = f.Value
		case f.Name == ":path":
			r.method = f.Value
		case strings.HasPrefix(f.Name, ":"):
		case f.Name == "content-type":
			contentType = f.Value
		case f.Name == "grpc-encoding":
			r.encoding = f.Value
		case reservedHeader(f.Name):
		default:
			v := f.Value
			if strings.HasSuffix(f.Name, "-bin") {
				b, err := decodeBinHeader(v)
				if err != nil {
					return r, status.Errorf(codes.InvalidArgument, "wire: header %s: %v", f.Name, err)
				}
				v = string(b)
			}
			if r.md == nil {
				r.md = metadata.MD{}
			}
			r.md[f.Name] = append(r.md[f.Name], v)
		}
	}
	switch {
	case method != "POST":
		return r, status.Errorf(codes.Internal, "wire: method %q: gRPC takes POST", method)
	case r.method == "":
		return r, status.Error(codes.Unimplemented, "wire: a request without :path")
	case contentType != "application/grpc" && !strings.HasPrefix(contentType, "application/grpc+") && !strings.HasPrefix(contentType, "application/grpc;"):
		return r, status.Errorf(codes.Internal, "wire: content-type %q: not gRPC", contentType)
	}
	if r.encoding == "identity" {
		r.encoding = ""
	}
	if r.encoding != "" && encoding.GetCompressor(r.encoding) == nil {
		return r, status.Errorf(codes.Unimplemented, "grpc: Decompressor is not installed for grpc-encoding %q", r.encoding)
	}
	return r, nil
}

func decodeBinHeader(v string) ([]byte, error) {
	if len(v)%4 == 0 {
		return base64.StdEncoding.DecodeString(v)
	}
	return base64.RawStdEncoding.DecodeString(v)
}

// decompress inflates a compressed message with the stream's compressor,
// refusing one that inflates beyond limit (ResourceExhausted, as grpc-go
// says it).
func decompress(name string, msg []byte, limit int) ([]byte, error) {
	c := encoding.GetCompressor(name)
	if c == nil {
		return nil, status.Errorf(codes.Internal, "grpc: a compressed message without a known grpc-encoding (%q)", name)
	}
	r, err := c.Decompress(bytes.NewReader(msg))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "grpc: failed to decompress the received message: %v", err)
	}
	out, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "grpc: failed to decompress the received message: %v", err)
	}
	if len(out) > limit {
		return nil, status.Errorf(codes.ResourceExhausted, "grpc: received message after decompression larger than max (%d)", limit)
	}
	return out, nil
}
