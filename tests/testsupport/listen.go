package testsupport

import (
	"net"
	"sync"
	"testing"
)

// Listen listens on a free loopback TCP port until the test ends, or fails
// the test.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// AcceptEach hands every connection ln accepts to handle, in the calling
// goroutine, until ln is closed; handle starts whatever serves the
// connection.
func AcceptEach(ln net.Listener, handle func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		handle(c)
	}
}

// Serve accepts on ln until the test ends, runs greet on each connection
// and then holds it open; at the end the listener and every connection are
// closed and the goroutines waited for.
func Serve(t testing.TB, ln net.Listener, greet func(net.Conn)) {
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		AcceptEach(ln, func(c net.Conn) {
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				greet(c)
			}()
		})
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// SilentServer accepts connections on loopback and never says a word (a
// frozen server: it hangs rather than refuses); it returns the address.
func SilentServer(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	Serve(t, ln, func(net.Conn) {})
	return ln.Addr().String()
}
