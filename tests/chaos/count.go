//go:build linux

package chaos

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
)

// Protocol is what a proxy's clients speak, so it can count requests.
type Protocol int

const (
	// Raw counts connections only: one request per connection.
	Raw Protocol = iota
	// HTTP1 counts HTTP/1.x requests (Consul's HTTP API).
	HTTP1
	// HTTP2 counts the gRPC messages a client sends over HTTP/2 (etcd):
	// a unary call is one, a stream counts each message it carries.
	HTTP2
	// Framed counts 4-byte length-prefixed frames (ZooKeeper's client
	// protocol: the connect request, then one frame per request or ping).
	Framed
	// TLSRecords counts the TLS application-data records a client sends
	// (kube-apiserver, whose traffic the proxy cannot read): a request is
	// one record or a few, and a connection's set-up adds a few more.
	TLSRecords
	// PgWire counts the round trips a PostgreSQL client asks for over an
	// unencrypted connection: each Sync message (the end of an extended
	// query: Parse, Bind, Execute, Sync) and each simple Query message.
	// The start-up message is not counted.
	PgWire
)

// maxHeader bounds an HTTP/1 request head; a longer one stops counting on
// that connection rather than buffering without end.
const maxHeader = 64 << 10

// newCounter returns a writer that is fed the client-to-server bytes of one
// connection and adds each request it recognises to n.
func newCounter(proto Protocol, n *atomic.Int64, onReq func() *func(string)) io.Writer {
	switch proto {
	case HTTP1:
		return &http1Counter{n: n, onReq: onReq}
	case HTTP2:
		return &http2Counter{n: n, preface: len(http2Preface)}
	case Framed:
		return frameCounter(n)
	case TLSRecords:
		return tlsCounter(n)
	case PgWire:
		return &pgCounter{n: n}
	}
	n.Add(1)
	return io.Discard
}

// http1Counter follows a stream of HTTP/1 requests: head, then a body of
// Content-Length bytes or chunks.
type http1Counter struct {
	n     *atomic.Int64
	onReq func() *func(string)

	state  int // h1Head, h1Body, h1ChunkSize, h1ChunkData, h1Trailer, h1Lost
	line   []byte
	remain int64
}

const (
	h1Head = iota
	h1Body
	h1ChunkSize
	h1ChunkData
	h1Trailer
	h1Lost
)

// Write consumes client bytes; it never fails.
func (c *http1Counter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		switch c.state {
		case h1Lost:
			return n, nil
		case h1Head:
			i := bytes.Index(p, []byte("\n"))
			if i < 0 {
				c.line = append(c.line, p...)
				if len(c.line) > maxHeader {
					c.state = h1Lost
				}
				return n, nil
			}
			c.line = append(c.line, p[:i+1]...)
			p = p[i+1:]
			if end := bytes.HasSuffix(c.line, []byte("\r\n\r\n")) || bytes.HasSuffix(c.line, []byte("\n\n")); end {
				c.head(c.line)
				c.line = c.line[:0]
			} else if len(c.line) > maxHeader {
				c.state = h1Lost
			}
		case h1Body, h1ChunkData:
			k := int64(len(p))
			if k > c.remain {
				k = c.remain
			}
			p = p[k:]
			c.remain -= k
			if c.remain == 0 {
				if c.state == h1Body {
					c.state = h1Head
				} else {
					c.state = h1ChunkSize // the CRLF after the data reads as an empty size line
				}
			}
		case h1ChunkSize, h1Trailer:
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				c.line = append(c.line, p...)
				if len(c.line) > maxHeader {
					c.state = h1Lost
				}
				return n, nil
			}
			c.line = append(c.line, p[:i+1]...)
			p = p[i+1:]
			line := strings.TrimSpace(string(c.line))
			c.line = c.line[:0]
			if c.state == h1Trailer {
				if line == "" {
					c.state = h1Head
				}
				continue
			}
			if line == "" {
				continue // CRLF closing the previous chunk's data
			}
			size, err := strconv.ParseInt(strings.TrimSpace(strings.SplitN(line, ";", 2)[0]), 16, 64)
			switch {
			case err != nil || size < 0:
				c.state = h1Lost
			case size == 0:
				c.state = h1Trailer
			default:
				c.state, c.remain = h1ChunkData, size
			}
		}
	}
	return n, nil
}

// head counts one request and sets up skipping its body.
func (c *http1Counter) head(head []byte) {
	c.n.Add(1)
	lines := strings.Split(strings.ReplaceAll(string(head), "\r\n", "\n"), "\n")
	if f := c.onReq(); f != nil {
		(*f)(lines[0])
	}
	c.state = h1Head
	for _, l := range lines[1:] {
		name, value, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "content-length":
			if v, err := strconv.ParseInt(value, 10, 64); err == nil && v > 0 {
				c.state, c.remain = h1Body, v
			}
		case "transfer-encoding":
			if strings.Contains(strings.ToLower(value), "chunked") {
				c.state = h1ChunkSize
			}
		}
	}
}

// http2Preface is what every HTTP/2 client sends first.
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// http2Counter walks HTTP/2 frames and counts the gRPC messages the client
// sends: one per unary call, one per message on a stream (a lease
// keep-alive stream carries one per renewal).
type http2Counter struct {
	n       *atomic.Int64
	preface int // bytes of the preface still to skip
	hdr     []byte

	skip       int  // payload bytes of a non-DATA frame still to skip
	data       int  // DATA bytes of the current frame still to read
	pad        int  // padding bytes of the current frame still to skip
	needPadLen bool // the current DATA frame's pad length byte is next
	stream     uint32
	endStream  bool
	msgs       map[uint32]*grpcMsg
}

// grpcMsg follows gRPC's length-prefixed messages on one stream.
type grpcMsg struct {
	hdr    []byte
	remain int
}

// HTTP/2 frame types and flags the counter needs (RFC 9113).
const (
	h2Data      = 0x0
	h2EndStream = 0x1
	h2Padded    = 0x8
)

// Write consumes client bytes; it never fails.
func (c *http2Counter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		switch {
		case c.preface > 0:
			k := min(c.preface, len(p))
			c.preface -= k
			p = p[k:]
		case c.skip > 0:
			k := min(c.skip, len(p))
			c.skip -= k
			p = p[k:]
		case c.needPadLen:
			c.pad = int(p[0])
			c.data -= 1 + c.pad
			c.needPadLen = false
			p = p[1:]
			if c.data < 0 { // malformed; skip what is left
				c.skip, c.data, c.pad = max(c.data+c.pad, 0), 0, 0
			}
			c.frameDone()
		case c.data > 0:
			k := min(c.data, len(p))
			c.message().feed(p[:k], c.n)
			c.data -= k
			p = p[k:]
			c.frameDone()
		case c.pad > 0:
			k := min(c.pad, len(p))
			c.pad -= k
			p = p[k:]
			c.frameDone()
		default:
			k := min(9-len(c.hdr), len(p))
			c.hdr = append(c.hdr, p[:k]...)
			p = p[k:]
			if len(c.hdr) < 9 {
				return n, nil
			}
			length := int(c.hdr[0])<<16 | int(c.hdr[1])<<8 | int(c.hdr[2])
			typ, flags := c.hdr[3], c.hdr[4]
			c.stream = (uint32(c.hdr[5])<<24 | uint32(c.hdr[6])<<16 | uint32(c.hdr[7])<<8 | uint32(c.hdr[8])) & 0x7fffffff
			c.hdr = c.hdr[:0]
			if typ != h2Data {
				c.skip = length
				continue
			}
			c.data, c.endStream = length, flags&h2EndStream != 0
			c.needPadLen = flags&h2Padded != 0 && length > 0
			c.frameDone()
		}
	}
	return n, nil
}

// message is the gRPC message state of the current stream.
func (c *http2Counter) message() *grpcMsg {
	if c.msgs == nil {
		c.msgs = map[uint32]*grpcMsg{}
	}
	m := c.msgs[c.stream]
	if m == nil {
		m = &grpcMsg{}
		c.msgs[c.stream] = m
	}
	return m
}

// frameDone forgets a stream whose last DATA frame has been read.
func (c *http2Counter) frameDone() {
	if c.data == 0 && c.pad == 0 && !c.needPadLen && c.endStream {
		delete(c.msgs, c.stream)
		c.endStream = false
	}
}

// feed reads message bytes and counts each message header.
func (m *grpcMsg) feed(p []byte, n *atomic.Int64) {
	for len(p) > 0 {
		if m.remain > 0 {
			k := min(m.remain, len(p))
			m.remain -= k
			p = p[k:]
			continue
		}
		k := min(5-len(m.hdr), len(p))
		m.hdr = append(m.hdr, p[:k]...)
		p = p[k:]
		if len(m.hdr) == 5 {
			n.Add(1)
			m.remain = int(m.hdr[1])<<24 | int(m.hdr[2])<<16 | int(m.hdr[3])<<8 | int(m.hdr[4])
			m.hdr = m.hdr[:0]
		}
	}
}

// recordCounter walks a stream of records, each a fixed-size header that
// gives the length of the body after it, and counts the records counts
// accepts.
type recordCounter struct {
	n      *atomic.Int64
	hdrLen int
	body   func(hdr []byte) int  // the body length the header gives
	counts func(hdr []byte) bool // nil counts every record
	hdr    []byte
	remain int
}

// frameCounter counts length-prefixed frames (a 4-byte big-endian length).
func frameCounter(n *atomic.Int64) *recordCounter {
	return &recordCounter{n: n, hdrLen: 4, body: func(h []byte) int {
		return int(h[0])<<24 | int(h[1])<<16 | int(h[2])<<8 | int(h[3])
	}}
}

// tlsApplicationData is the record type of encrypted traffic (RFC 8446).
const tlsApplicationData = 23

// tlsCounter walks TLS records (5-byte header: type, version, length) and
// counts those of type application data.
func tlsCounter(n *atomic.Int64) *recordCounter {
	return &recordCounter{n: n, hdrLen: 5,
		body:   func(h []byte) int { return int(h[3])<<8 | int(h[4]) },
		counts: func(h []byte) bool { return h[0] == tlsApplicationData },
	}
}

// Write consumes client bytes; it never fails.
func (c *recordCounter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if c.remain > 0 {
			k := min(c.remain, len(p))
			c.remain -= k
			p = p[k:]
			continue
		}
		k := min(c.hdrLen-len(c.hdr), len(p))
		c.hdr = append(c.hdr, p[:k]...)
		p = p[k:]
		if len(c.hdr) == c.hdrLen {
			if c.counts == nil || c.counts(c.hdr) {
				c.n.Add(1)
			}
			c.remain = c.body(c.hdr)
			c.hdr = c.hdr[:0]
		}
	}
	return n, nil
}

// PostgreSQL frontend messages the counter needs (protocol 3.0).
const (
	pgSync  = 'S'
	pgQuery = 'Q'
	// pgSSLRequest and pgGSSRequest are the start-up packets that ask for
	// encryption; another start-up packet follows a refusal.
	pgSSLRequest = 80877103
	pgGSSRequest = 80877104
)

// pgCounter walks a PostgreSQL client's messages: start-up packets (a
// 4-byte length that counts itself, then the body), then typed messages
// (a type byte, then such a length and the body).
type pgCounter struct {
	n       *atomic.Int64
	started bool // past the start-up packet
	hdr     []byte
	remain  int
	body    []byte // the start of a start-up packet's body, to tell its code
}

// Write consumes client bytes; it never fails.
func (c *pgCounter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if c.remain > 0 {
			k := min(c.remain, len(p))
			if !c.started && len(c.body) < 4 {
				c.body = append(c.body, p[:min(k, 4-len(c.body))]...)
			}
			c.remain -= k
			p = p[k:]
			if c.remain == 0 && !c.started {
				c.startupDone()
			}
			continue
		}
		hdrLen := 5
		if !c.started {
			hdrLen = 4
		}
		k := min(hdrLen-len(c.hdr), len(p))
		c.hdr = append(c.hdr, p[:k]...)
		p = p[k:]
		if len(c.hdr) < hdrLen {
			continue
		}
		l := c.hdr[hdrLen-4:]
		length := int(l[0])<<24 | int(l[1])<<16 | int(l[2])<<8 | int(l[3])
		if c.started && (c.hdr[0] == pgSync || c.hdr[0] == pgQuery) {
			c.n.Add(1)
		}
		c.remain = max(length-4, 0)
		c.hdr = c.hdr[:0]
		if c.remain == 0 && !c.started {
			c.startupDone()
		}
	}
	return n, nil
}

// startupDone ends a start-up packet: typed messages follow, unless it
// asked for encryption (then another start-up packet comes, in clear
// text if the server refused).
func (c *pgCounter) startupDone() {
	code := 0
	if len(c.body) == 4 {
		code = int(c.body[0])<<24 | int(c.body[1])<<16 | int(c.body[2])<<8 | int(c.body[3])
	}
	c.body = c.body[:0]
	c.started = code != pgSSLRequest && code != pgGSSRequest
}
