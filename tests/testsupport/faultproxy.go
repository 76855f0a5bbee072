package testsupport

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

// FaultyHTTP is a reverse proxy to an HTTP server (a Consul agent, say)
// that answers 500 to the requests its current fault picks by URL path.
// It passes everything until told otherwise, and closes with the test.
type FaultyHTTP struct {
	Addr  string // host:port to point a client at
	fault atomic.Value
}

type httpFault struct {
	prefix string
	except bool // fail every path but those with prefix
}

// NewFaultyHTTP starts a FaultyHTTP in front of target (host:port).
func NewFaultyHTTP(t testing.TB, target string) *FaultyHTTP {
	t.Helper()
	u, err := url.Parse("http://" + target)
	if err != nil {
		t.Fatal(err)
	}
	p := &FaultyHTTP{}
	p.fault.Store(httpFault{})
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f := p.fault.Load().(httpFault); f.prefix != "" && strings.HasPrefix(r.URL.Path, f.prefix) != f.except {
			http.Error(w, "injected fault", http.StatusInternalServerError)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.Addr = strings.TrimPrefix(srv.URL, "http://")
	return p
}

// FailPrefix fails every request whose path starts with prefix; "" ends
// the faults.
func (p *FaultyHTTP) FailPrefix(prefix string) { p.fault.Store(httpFault{prefix: prefix}) }

// FailExcept fails every request but those whose path starts with prefix;
// "" ends the faults.
func (p *FaultyHTTP) FailExcept(prefix string) {
	p.fault.Store(httpFault{prefix: prefix, except: true})
}
