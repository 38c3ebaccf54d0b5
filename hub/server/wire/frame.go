package wire

import (
	"encoding/binary"
	"fmt"
)

// HTTP/2 frame types (RFC 9113, section 6).
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	framePriority     = 0x2
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePushPromise  = 0x5
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9
)

// Frame flags.
const (
	flagEndStream  = 0x1 // DATA, HEADERS
	flagAck        = 0x1 // SETTINGS, PING
	flagEndHeaders = 0x4 // HEADERS, CONTINUATION
	flagPadded     = 0x8 // DATA, HEADERS
	flagPriority   = 0x20
)

// Error codes (RFC 9113, section 7).
const (
	codeNo                 = 0x0
	codeProtocol           = 0x1
	codeInternal           = 0x2
	codeFlowControl        = 0x3
	codeStreamClosed       = 0x5
	codeFrameSize          = 0x6
	codeRefusedStream      = 0x7
	codeCancel             = 0x8
	codeCompression        = 0x9
	codeEnhanceYourCalm    = 0xb
	codeInadequateSecurity = 0xc
)

// Settings (RFC 9113, section 6.5.2).
const (
	settingHeaderTableSize      = 0x1
	settingEnablePush           = 0x2
	settingMaxConcurrentStreams = 0x3
	settingInitialWindowSize    = 0x4
	settingMaxFrameSize         = 0x5
	settingMaxHeaderListSize    = 0x6
)

const (
	frameHeaderLen = 9
	// defaultWindow is a connection's and a stream's flow-control window
	// before SETTINGS and WINDOW_UPDATE change them.
	defaultWindow = 65535
	// maxWindow is the largest window RFC 9113 allows.
	maxWindow = 1<<31 - 1
	// maxFrameSize is the largest frame payload this server accepts (the
	// protocol's default; it advertises no other) and the largest it
	// sends until the client allows more.
	maxFrameSize = 16384
	// clientPreface is what every HTTP/2 connection starts with.
	clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
)

// frameHeader is a frame's 9-byte header.
type frameHeader struct {
	length uint32
	typ    uint8
	flags  uint8
	stream uint32
}

func parseFrameHeader(b []byte) frameHeader {
	return frameHeader{
		length: uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]),
		typ:    b[3],
		flags:  b[4],
		stream: binary.BigEndian.Uint32(b[5:9]) & (1<<31 - 1),
	}
}

func (h frameHeader) has(f uint8) bool { return h.flags&f != 0 }

func (h frameHeader) String() string {
	return fmt.Sprintf("frame type %d, flags %#x, stream %d, %d bytes", h.typ, h.flags, h.stream, h.length)
}

func appendFrameHeader(b []byte, length int, typ, flags uint8, stream uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), typ, flags,
		byte(stream>>24), byte(stream>>16), byte(stream>>8), byte(stream))
}

// setting is one parameter of a SETTINGS frame.
type setting struct {
	id  uint16
	val uint32
}

func appendSettings(b []byte, settings ...setting) []byte {
	b = appendFrameHeader(b, 6*len(settings), frameSettings, 0, 0)
	for _, s := range settings {
		b = binary.BigEndian.AppendUint16(b, s.id)
		b = binary.BigEndian.AppendUint32(b, s.val)
	}
	return b
}

func appendSettingsAck(b []byte) []byte { return appendFrameHeader(b, 0, frameSettings, flagAck, 0) }

func appendPing(b []byte, ack bool, data [8]byte) []byte {
	var flags uint8
	if ack {
		flags = flagAck
	}
	return append(appendFrameHeader(b, 8, framePing, flags, 0), data[:]...)
}

func appendWindowUpdate(b []byte, stream, incr uint32) []byte {
	return binary.BigEndian.AppendUint32(appendFrameHeader(b, 4, frameWindowUpdate, 0, stream), incr)
}

func appendRSTStream(b []byte, stream, code uint32) []byte {
	return binary.BigEndian.AppendUint32(appendFrameHeader(b, 4, frameRSTStream, 0, stream), code)
}

func appendGoAway(b []byte, last, code uint32, debug string) []byte {
	b = appendFrameHeader(b, 8+len(debug), frameGoAway, 0, 0)
	b = binary.BigEndian.AppendUint32(b, last)
	b = binary.BigEndian.AppendUint32(b, code)
	return append(b, debug...)
}

// appendHeaders appends a header block as a HEADERS frame and, when it is
// longer than maxFrame, CONTINUATION frames.
func appendHeaders(b []byte, stream uint32, block []byte, endStream bool, maxFrame int) []byte {
	var flags uint8
	if endStream {
		flags = flagEndStream
	}
	typ := uint8(frameHeaders)
	for {
		n := min(len(block), maxFrame)
		f := flags
		if n == len(block) {
			f |= flagEndHeaders
		}
		b = append(appendFrameHeader(b, n, typ, f, stream), block[:n]...)
		block = block[n:]
		if len(block) == 0 {
			return b
		}
		typ, flags = frameContinuation, 0
	}
}

func appendData(b []byte, stream uint32, data []byte, endStream bool) []byte {
	var flags uint8
	if endStream {
		flags = flagEndStream
	}
	return append(appendFrameHeader(b, len(data), frameData, flags, stream), data...)
}

// connError is an error of the whole connection (RFC 9113, section 5.4.1):
// the server sends GOAWAY with its code and closes the connection.
type connError struct {
	code uint32
	why  string
}

func (e connError) Error() string { return fmt.Sprintf("wire: connection error %d: %s", e.code, e.why) }

func connErrorf(code uint32, format string, args ...any) error {
	return connError{code: code, why: fmt.Sprintf(format, args...)}
}
