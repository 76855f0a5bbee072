package testsupport

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// NotifySocket listens like systemd for sd_notify messages on a unixgram
// socket, until the test ends. It returns the socket's path (for
// NOTIFY_SOCKET) and the messages as they arrive.
func NotifySocket(t testing.TB) (path string, msgs <-chan string) {
	t.Helper()
	// Socket paths are short (108 bytes); t.TempDir() can be too long.
	dir, err := os.MkdirTemp("", "lr-notify-")
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			ch <- string(buf[:n])
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done; os.RemoveAll(dir) })
	return path, ch
}

// ExpectNotify waits for a message containing want, skipping others, and
// returns it; the test fails if none arrives within the time given.
func ExpectNotify(t testing.TB, msgs <-chan string, want string, within time.Duration) string {
	t.Helper()
	m, ok := NextNotify(msgs, want, within)
	if !ok {
		t.Fatalf("no notification with %q within %v", want, within)
	}
	return m
}

// NextNotify waits up to within for a message containing want, skipping
// others; ok is false when none came. A test asserting silence fails on ok.
func NextNotify(msgs <-chan string, want string, within time.Duration) (m string, ok bool) {
	timeout := time.After(within)
	for {
		select {
		case m := <-msgs:
			if strings.Contains(m, want) {
				return m, true
			}
		case <-timeout:
			return "", false
		}
	}
}

// DrainNotify discards the messages that arrive within d.
func DrainNotify(msgs <-chan string, d time.Duration) {
	end := time.After(d)
	for {
		select {
		case <-msgs:
		case <-end:
			return
		}
	}
}
