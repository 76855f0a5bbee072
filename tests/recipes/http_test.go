//go:build linux

package recipes

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/leaderrun/leaderrun/examples/httpfence"
)

// localArgs run leaderrun on the local backend, in a lock folder of the
// test's own.
func localArgs(t *testing.T, key string) []string {
	return []string{"--backend", "local", "--lock-dir", t.TempDir(), "--key", key,
		"--ttl", "4s", "--renew-interval", "1s", "--kill-grace", "1s", "--safety-margin", "500ms"}
}

// TestHTTPRecipe: a job sends its epoch in the Leader-Epoch header (curl
// -H), and examples/httpfence in front of a real HTTP server turns away a
// lower one.
func TestHTTPRecipe(t *testing.T) {
	var mu sync.Mutex
	stored := map[string]string{}
	store := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.Method {
		case http.MethodPut:
			b, _ := io.ReadAll(r.Body)
			stored[r.URL.Path] = string(b)
		case http.MethodGet:
			io.WriteString(w, stored[r.URL.Path])
		}
	})
	fenced := httpfence.New(store, func(r *http.Request) string { return r.URL.Path })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			store.ServeHTTP(w, r) // reads need no fence
			return
		}
		fenced.ServeHTTP(w, r)
	}))
	defer srv.Close()

	write := func(t *testing.T, env []string, value string) bool {
		// The recipe's request, as docs/FENCING.md shows it.
		code, out := sh(t, append(env, "URL="+srv.URL+"/billing/last-run", "VALUE="+value),
			`curl -sS --fail-with-body -X PUT -H "Leader-Epoch: $LEADER_EPOCH" --data "$VALUE" "$URL"`)
		switch {
		case code == 0:
			return true
		case strings.Contains(out, "409"), strings.Contains(out, "stale leader"):
			t.Logf("rejected: %s", strings.TrimSpace(out))
			return false
		}
		t.Fatalf("curl: exit %d: %s", code, out)
		return false
	}
	read := func(t *testing.T) string {
		resp, err := http.Get(srv.URL + "/billing/last-run")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	proveFence(t, localArgs(t, "recipe-http"), "", []string{"PATH=" + jobPath(t)}, write, read)

	// Without the header a write is refused, not let through.
	resp, err := http.Post(srv.URL+"/billing/last-run", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusPreconditionRequired {
		t.Errorf("a write without %s got %d, want 428", httpfence.Header, resp.StatusCode)
	}
}
