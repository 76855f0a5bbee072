package chaos

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

func newProxy(t *testing.T, target string, proto Protocol) *Proxy {
	t.Helper()
	p, err := NewProxy(target, proto)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func echoHandler(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	_, _ = w.Write(b)
}

func TestProxyCountsHTTP1Requests(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(echoHandler))
	defer srv.Close()
	p := newProxy(t, strings.TrimPrefix(srv.URL, "http://"), HTTP1)
	var mu sync.Mutex
	var lines []string
	p.OnRequest(func(l string) {
		mu.Lock()
		lines = append(lines, l)
		mu.Unlock()
	})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	url := "http://" + p.Addr()
	for i := 0; i < 5; i++ {
		resp, err := c.Post(url+"/v1/kv/x", "text/plain", strings.NewReader(strings.Repeat("body\r\n\r\n", i*100)))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	// A chunked body (unknown length) counts once as well.
	resp, err := c.Post(url+"/chunked", "text/plain", io.MultiReader(strings.NewReader("a"), strings.NewReader("GET / HTTP/1.1\r\n\r\n")))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	resp, err = c.Get(url + "/v1/kv/x?index=5")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := p.Requests(); got != 7 {
		t.Errorf("Requests() = %d, want 7", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lines) != 7 || lines[6] != "GET /v1/kv/x?index=5 HTTP/1.1" {
		t.Errorf("request lines %q", lines)
	}
}

// grpcBody frames payloads as gRPC length-prefixed messages.
func grpcBody(payloads ...string) string {
	var b strings.Builder
	for _, p := range payloads {
		n := len(p)
		b.WriteString(string([]byte{0, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}))
		b.WriteString(p)
	}
	return b.String()
}

func TestProxyCountsGRPCMessages(t *testing.T) {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(echoHandler))
	srv.Config.Protocols = &protos
	srv.Start()
	defer srv.Close()
	p := newProxy(t, strings.TrimPrefix(srv.URL, "http://"), HTTP2)
	tr := &http.Transport{Protocols: &protos}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	for i := 0; i < 4; i++ {
		// Two messages per call, one larger than an HTTP/2 frame.
		body := grpcBody(strings.Repeat("x", 70000), "")
		resp, err := c.Post("http://"+p.Addr()+"/x", "application/grpc", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("spoke %s, want HTTP/2", resp.Proto)
		}
	}
	if got := p.Requests(); got != 8 {
		t.Errorf("Requests() = %d, want 8 gRPC messages", got)
	}
}

func TestProxyCut(t *testing.T) {
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	p := newProxy(t, strings.TrimPrefix(srv.URL, "http://"), HTTP1)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 500 * time.Millisecond}
	get := func() error {
		resp, err := c.Get("http://" + p.Addr() + "/")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		return err
	}
	if err := get(); err != nil {
		t.Fatalf("open proxy: %v", err)
	}

	p.Cut(Refuse)
	start := time.Now()
	if err := get(); err == nil {
		t.Fatal("request through a refusing proxy succeeded")
	}
	if took := time.Since(start); took > 400*time.Millisecond {
		t.Errorf("refused request took %v; a refusal should be immediate", took)
	}
	p.Heal()
	if err := get(); err != nil {
		t.Fatalf("after heal: %v", err)
	}

	// A blackhole: the kept-alive connection and a new one both hang.
	before := served.Load()
	p.Cut(Blackhole)
	if err := get(); err == nil {
		t.Fatal("request through a blackhole succeeded")
	}
	raw, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("a blackhole accepts connections: %v", err)
	}
	_, _ = io.WriteString(raw, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	_ = raw.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := raw.Read(make([]byte, 10)); err == nil || n > 0 {
		t.Fatalf("blackholed connection answered %d bytes", n)
	}
	if served.Load() != before {
		t.Fatal("a request crossed the blackhole")
	}
	p.Heal()
	// The blackholed connection is closed by the heal.
	_ = raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := raw.Read(make([]byte, 10)); err == nil {
		t.Error("blackholed connection still open after heal")
	}
	raw.Close()
	if err := get(); err != nil {
		t.Fatalf("after healing the blackhole: %v", err)
	}
}

func TestFrameCounter(t *testing.T) {
	var n atomic.Int64
	w := newCounter(Framed, &n, nil)
	// Two frames (3 and 0 bytes of payload), fed a byte at a time.
	for _, b := range []byte{0, 0, 0, 3, 'a', 'b', 'c', 0, 0, 0, 0} {
		_, _ = w.Write([]byte{b})
	}
	if got := n.Load(); got != 2 {
		t.Fatalf("counted %d frames, want 2", got)
	}
}

func TestTLSCounter(t *testing.T) {
	var n atomic.Int64
	w := newCounter(TLSRecords, &n, nil)
	// A handshake record, then two application-data records (2 and 0
	// bytes), fed a byte at a time.
	for _, b := range []byte{22, 3, 1, 0, 1, 'h', 23, 3, 3, 0, 2, 'a', 'b', 23, 3, 3, 0, 0} {
		_, _ = w.Write([]byte{b})
	}
	if got := n.Load(); got != 2 {
		t.Fatalf("counted %d application-data records, want 2", got)
	}
}

func TestPgWireCounter(t *testing.T) {
	var n atomic.Int64
	w := newCounter(PgWire, &n, nil)
	be32 := func(v int) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }
	msg := func(typ byte, body string) []byte { return append(append([]byte{typ}, be32(4+len(body))...), body...) }
	var stream []byte
	// An SSLRequest the server refused, then the start-up packet, whose
	// body holds an 'S' and a 'Q' that are not messages.
	stream = append(stream, be32(8)...)
	stream = append(stream, be32(pgSSLRequest)...)
	startup := "\x00\x03\x00\x00user\x00SQ\x00\x00"
	stream = append(append(stream, be32(4+len(startup))...), startup...)
	// An extended query (Parse, Bind, Describe, Execute, Sync), a simple
	// query, a cached statement (Bind, Execute, Sync), Terminate.
	for _, m := range [][]byte{msg('P', "\x00SELECT 1\x00\x00\x00"), msg('B', "\x00\x00\x00\x00\x00\x00\x00\x00"), msg('D', "P\x00"),
		msg('E', "\x00\x00\x00\x00\x00"), msg('S', ""), msg('Q', "SELECT 1\x00"), msg('B', "SSSS"), msg('E', "QQQQQ"), msg('S', ""), msg('X', "")} {
		stream = append(stream, m...)
	}
	for _, b := range stream { // a byte at a time
		_, _ = w.Write([]byte{b})
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("counted %d round trips, want 3 (two Syncs and a Query)", got)
	}
	n.Store(0)
	w = newCounter(PgWire, &n, nil)
	_, _ = w.Write(stream) // all at once
	if got := n.Load(); got != 3 {
		t.Fatalf("counted %d round trips in one write, want 3", got)
	}
}

// TestProxyBeforeForwardHoldsTheMatchingBytes: the trap fires once, on the
// first client bytes that match, and the server sees those bytes only
// after it returned; bytes that do not match pass at once.
func TestProxyBeforeForwardHoldsTheMatchingBytes(t *testing.T) {
	ln := testsupport.Listen(t)
	got := make(chan string, 16)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				got <- string(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	p := newProxy(t, ln.Addr().String(), Raw)
	release := make(chan struct{})
	var fired atomic.Int32
	p.BeforeForward(func(b []byte) bool { return strings.Contains(string(b), "renew") }, func() {
		fired.Add(1)
		<-release
	})
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	recv := func(want string) {
		t.Helper()
		select {
		case s := <-got:
			if s != want {
				t.Fatalf("server read %q, want %q", s, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("server did not read %q", want)
		}
	}
	_, _ = c.Write([]byte("watch"))
	recv("watch") // no match: forwarded at once
	_, _ = c.Write([]byte("renew"))
	deadline := time.Now().Add(5 * time.Second)
	for fired.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if fired.Load() != 1 {
		t.Fatal("the trap did not fire on the matching bytes")
	}
	select {
	case s := <-got:
		t.Fatalf("server read %q while the trap held it", s)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	recv("renew")
	_, _ = c.Write([]byte("renew again"))
	recv("renew again") // one-shot: no second hold
	if n := fired.Load(); n != 1 {
		t.Errorf("the trap fired %d times, want once", n)
	}
}
