package kubernetes

import (
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// fileToken authenticates every request with the bearer token in a file,
// read again whenever the file changes. A pod's service-account token is
// such a file, which the kubelet replaces before the token expires; a
// kubeconfig may name one too (tokenFile). client-go's own handling re-reads
// the file only once a minute, so a revoked token replaced in the file would
// fail renewals for up to a minute, long past a short TTL. The token itself
// is never logged.
type fileToken struct {
	path string
	next http.RoundTripper

	mu    sync.Mutex
	token string
	mtime time.Time
	size  int64
}

// current returns the file's token, re-reading it if its modification time
// or size changed; it keeps the last good token when the file cannot be
// read for a moment (the kubelet replaces it by renaming).
func (f *fileToken) current() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	info, err := os.Stat(f.path)
	if err != nil || (info.ModTime().Equal(f.mtime) && info.Size() == f.size && f.token != "") {
		return f.token
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return f.token
	}
	f.token, f.mtime, f.size = strings.TrimSpace(string(b)), info.ModTime(), info.Size()
	return f.token
}

// RoundTrip sends req with the current token.
func (f *fileToken) RoundTrip(req *http.Request) (*http.Response, error) {
	if tok := f.current(); tok != "" {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return f.next.RoundTrip(req)
}
