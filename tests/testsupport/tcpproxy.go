package testsupport

import (
	"io"
	"net"
	"sync"
	"testing"
)

// TCPProxy passes TCP connections through to a server, bytes as they are
// (TLS included, so a client that verifies the server still does), until
// Cut: from then on it closes every connection it holds and every one it
// accepts, so its clients' requests fail as a host's cut off from the
// server would. It closes with the test.
type TCPProxy struct {
	Addr string // host:port to point a client at

	target string
	tap    func() io.Writer // each connection's client bytes also go to one
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
}

// NewTCPProxy starts a TCPProxy in front of target (host:port).
func NewTCPProxy(t testing.TB, target string) *TCPProxy {
	t.Helper()
	return NewTappedTCPProxy(t, target, nil)
}

// NewTappedTCPProxy is NewTCPProxy whose connections each also write what
// their client sends to a writer tap makes for them (nil: none).
func NewTappedTCPProxy(t testing.TB, target string, tap func() io.Writer) *TCPProxy {
	t.Helper()
	ln := Listen(t)
	p := &TCPProxy{Addr: ln.Addr().String(), target: target, tap: tap, conns: map[net.Conn]struct{}{}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		AcceptEach(ln, func(c net.Conn) {
			wg.Add(1)
			go func() { defer wg.Done(); p.pass(c) }()
		})
	}()
	t.Cleanup(func() { ln.Close(); p.Cut(); wg.Wait() })
	return p
}

// Cut closes every connection and refuses (accepts and closes) new ones.
func (p *TCPProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// hold adds c to the connections Cut closes, or closes it when cut.
func (p *TCPProxy) hold(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *TCPProxy) drop(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

// pass copies bytes both ways between client and a fresh connection to
// the target until either side ends.
func (p *TCPProxy) pass(client net.Conn) {
	if !p.hold(client) {
		return
	}
	defer p.drop(client)
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.hold(server) {
		return
	}
	defer p.drop(server)
	up := io.Writer(server)
	if p.tap != nil {
		up = io.MultiWriter(server, p.tap())
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, client); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, server); done <- struct{}{} }()
	<-done
}
