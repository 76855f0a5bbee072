//go:build linux

package chaos

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// CutMode says how a cut proxy treats the connections it drops and the new
// ones it is offered.
type CutMode int

const (
	// Refuse resets every connection, open or new: the client sees errors at
	// once, as from a host whose backend port is closed.
	Refuse CutMode = iota + 1
	// Blackhole keeps every connection open but moves no byte either way,
	// and accepts new ones only to ignore them: the client's calls hang
	// until their own timeouts, as across a network partition.
	Blackhole
)

// String names the mode.
func (m CutMode) String() string {
	switch m {
	case Refuse:
		return "refuse"
	case Blackhole:
		return "blackhole"
	}
	return "open"
}

// Proxy is a TCP proxy on loopback in front of one backend server, owned by
// one "host". Cutting it partitions that host from that server and from
// nothing else, which source-address rules cannot do on a shared loopback
// (DESIGN §7). It also counts the requests the host sends through it.
type Proxy struct {
	ln     net.Listener
	target string
	proto  Protocol

	mu    sync.Mutex
	mode  CutMode // 0 while open
	conns map[*link]struct{}
	held  []net.Conn // blackholed new connections
	done  bool

	requests atomic.Int64
	bytesOut atomic.Int64 // client to server
	bytesIn  atomic.Int64 // server to client
	onReq    atomic.Pointer[func(string)]
	onChunk  atomic.Pointer[func(conn uint64, toClient bool, n int)]
	links    atomic.Uint64 // numbers the connections for onChunk
	before   atomic.Pointer[trap]

	wg sync.WaitGroup
}

// link is one proxied connection.
type link struct {
	id             uint64
	client, server net.Conn
	frozen         chan struct{} // closed when blackholed
}

// NewProxy listens on a free 127.0.0.1 port and forwards to target
// (host:port), counting requests of the given protocol.
func NewProxy(target string, proto Protocol) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy for %s: %w", target, err)
	}
	p := &Proxy{ln: ln, target: target, proto: proto, conns: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the server the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Requests is the number of requests clients sent through the proxy so far.
func (p *Proxy) Requests() int64 { return p.requests.Load() }

// Bytes are the bytes moved so far, client to server and back.
func (p *Proxy) Bytes() (out, in int64) { return p.bytesOut.Load(), p.bytesIn.Load() }

// OnRequest sets a function called with the first line of every HTTP/1
// request (e.g. "GET /v1/kv/x?index=5 HTTP/1.1"); nil removes it. It runs
// on the proxy's copying goroutine and must return quickly.
func (p *Proxy) OnRequest(f func(line string)) {
	if f == nil {
		p.onReq.Store(nil)
		return
	}
	p.onReq.Store(&f)
}

// OnChunk sets a function called with every chunk of bytes the proxy
// forwards, before it goes on: the connection's number (from 1, in the
// order they were accepted), its direction (toClient: from the server)
// and size; nil removes it. It runs on the copying goroutine and must
// return quickly. The benchmark's breakdown times a standby's wake-up by
// it.
func (p *Proxy) OnChunk(f func(conn uint64, toClient bool, n int)) {
	if f == nil {
		p.onChunk.Store(nil)
		return
	}
	p.onChunk.Store(&f)
}

// trap is a one-shot BeforeForward.
type trap struct {
	match func(chunk []byte) bool
	f     func()
}

// BeforeForward calls f once, on the copying goroutine, before the next
// bytes from a client that match (any bytes if match is nil) go on to the
// server, and the bytes wait until f returns: a fault can strike while a
// request is in flight, for example stop the client right after it sent a
// renewal, which the server then grants. It replaces an earlier
// BeforeForward that has not fired; nil f disarms it.
func (p *Proxy) BeforeForward(match func(chunk []byte) bool, f func()) {
	if f == nil {
		p.before.Store(nil)
		return
	}
	p.before.Store(&trap{match: match, f: f})
}

// Cut partitions the proxy's host from its server in the given mode.
func (p *Proxy) Cut(mode CutMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = mode
	for l := range p.conns {
		switch mode {
		case Refuse:
			reset(l.client)
			l.server.Close()
		case Blackhole:
			if !l.isFrozen() {
				close(l.frozen)
			}
		}
	}
}

// Heal ends a cut. Blackholed connections are closed, as a real partition
// that outlived their timeouts would leave them; new connections are
// forwarded again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = 0
	for l := range p.conns {
		if l.isFrozen() {
			l.client.Close()
			l.server.Close()
		}
	}
	for _, c := range p.held {
		c.Close()
	}
	p.held = nil
}

// Mode is the current cut mode, 0 while open.
func (p *Proxy) Mode() CutMode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Close stops the proxy, closes every connection and waits for its
// goroutines.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.done = true
	for l := range p.conns {
		l.client.Close()
		l.server.Close()
	}
	for _, c := range p.held {
		c.Close()
	}
	p.held = nil
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// reset closes c with an RST rather than a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	testsupport.AcceptEach(p.ln, p.admit)
}

// admit deals with a new client connection as the mode says: reset, held
// silent, or forwarded. After Close (which closed the listener first) it is
// only closed.
func (p *Proxy) admit(c net.Conn) {
	p.mu.Lock()
	switch {
	case p.done:
		p.mu.Unlock()
		c.Close()
	case p.mode == Refuse:
		p.mu.Unlock()
		reset(c)
	case p.mode == Blackhole:
		p.held = append(p.held, c)
		p.mu.Unlock()
	default:
		p.mu.Unlock()
		p.wg.Add(1)
		go p.forward(c)
	}
}

// forward connects to the target and copies both ways until either side
// ends or the proxy drops the link.
func (p *Proxy) forward(client net.Conn) {
	defer p.wg.Done()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		reset(client)
		return
	}
	l := &link{id: p.links.Add(1), client: client, server: server, frozen: make(chan struct{})}
	p.mu.Lock()
	if p.done || p.mode != 0 {
		// Cut while we dialled.
		p.mu.Unlock()
		reset(client)
		server.Close()
		return
	}
	p.conns[l] = struct{}{}
	p.mu.Unlock()

	counter := newCounter(p.proto, &p.requests, p.onReq.Load)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		p.copy(l, server, client, &p.bytesOut, counter)
	}()
	go func() {
		defer wg.Done()
		p.copy(l, client, server, &p.bytesIn, nil)
	}()
	wg.Wait()
	client.Close()
	server.Close()
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
}

// copy moves bytes from src to dst until either side ends. While the link
// is blackholed it keeps reading and drops what it reads, as a partition
// loses packets, and passes no end of connection on; Heal or Close closes
// the sockets, which ends it.
func (p *Proxy) copy(l *link, dst, src net.Conn, n *atomic.Int64, c io.Writer) {
	buf := make([]byte, 32<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 && !l.isFrozen() {
			if c != nil {
				_, _ = c.Write(buf[:k])
				if t := p.before.Load(); t != nil && (t.match == nil || t.match(buf[:k])) && p.before.CompareAndSwap(t, nil) {
					t.f()
				}
			}
			n.Add(int64(k))
			if f := p.onChunk.Load(); f != nil {
				(*f)(l.id, n == &p.bytesIn, k)
			}
			if _, werr := dst.Write(buf[:k]); werr != nil {
				src.Close()
				return
			}
		}
		if err != nil {
			if !l.isFrozen() {
				dst.Close()
			}
			return
		}
	}
}

func (l *link) isFrozen() bool { return testsupport.IsClosed(l.frozen) }
