package testsupport

import (
	"net"
	"sync"
	"testing"
)

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
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				greet(c)
			}()
		}
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
