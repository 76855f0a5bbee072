//go:build linux

package guard

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// bigHello is a hello of n bytes, larger than a pipe holds: a kubeconfig's
// CA bundle makes one.
func bigHello(n int) []byte {
	return []byte(`{"backend":"kubernetes","settings":{"ca":"` + strings.Repeat("A", n) + `"}}`)
}

// Start hands the guard its hello whole, however large: written at once
// into a pipe of 64 KiB, all but the first 64 KiB was lost, the guard read
// the lease message run into a piece of the hello, and the next message
// found the pipe full and had the guard killed, again with each new guard.
func TestStartDeliversALargeHelloWhole(t *testing.T) {
	for _, size := range []int{100, 70 << 10, 600 << 10, 3 << 20} {
		out := filepath.Join(t.TempDir(), "read")
		// A stand-in guard that reads its input slowly, as a busy host's
		// would, and keeps all of it.
		spec := &Spec{Path: "/bin/sh", Args: []string{"sh", "-c", `sleep 0.3; exec cat > "$OUT"`},
			Env: append(os.Environ(), "OUT="+out), Hello: bigHello(size)}
		p, err := Start(spec, "h", nil, testStarter, nullLog{})
		if err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		p.Watch(MonoNow(), Job{Pgid: 1234, Since: 5})
		p.Stop()
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		want := Hello(spec.Hello) + Lease("h") + Watch(0, Job{}) + Done()
		lines := strings.Split(string(got), "\n")
		if len(lines) != 5 || lines[0] != strings.TrimSuffix(Hello(spec.Hello), "\n") || lines[1] != "lease h" ||
			!strings.HasPrefix(lines[2], "watch ") || lines[3] != "done" {
			t.Errorf("%d-byte hello: the guard read %d bytes in %d lines, want %d bytes: hello, lease, watch, done",
				size, len(got), len(lines)-1, len(want))
		}
	}
}

// A hello larger than any guard reads is refused before the guard could
// take a piece of it for the end of its input.
func TestStartRefusesAHelloTooLarge(t *testing.T) {
	spec := &Spec{Path: "/bin/sh", Args: []string{"sh", "-c", `exec cat > /dev/null`}, Hello: bigHello(MaxMessage)}
	if p, err := Start(spec, "h", nil, testStarter, nullLog{}); err == nil {
		p.Stop()
		t.Fatal("a hello over MaxMessage was sent")
	} else if !strings.Contains(err.Error(), "hello") {
		t.Errorf("error %q does not say it is the hello", err)
	}
}

// The guard reads a hello of several MiB whole and releases with it: one
// over its reader's old 1 MiB bound ended its input, as if leaderrun had
// died.
func TestRunReadsALargeHello(t *testing.T) {
	hello := bigHello(3 << 20)
	r, w := io.Pipe()
	var mu sync.Mutex
	var got []byte
	released := make(chan struct{})
	release := func(_ context.Context, h []byte, handle string) error {
		mu.Lock()
		defer mu.Unlock()
		if got == nil {
			got = h
			close(released)
		}
		return nil
	}
	code := make(chan int, 1)
	go func() { code <- Run(r, nil, release, nullLog{}) }()
	j := job(t)
	go func() {
		_, _ = io.WriteString(w, Hello(hello)+Lease("h")+Watch(MonoNow()+int64(50*time.Millisecond), j))
	}()
	select {
	case <-released:
	case <-time.After(20 * time.Second):
		t.Fatal("the guard never released")
	}
	waitGone(t, j, 5*time.Second)
	_, _ = io.WriteString(w, Done())
	_ = w.Close()
	<-code
	mu.Lock()
	defer mu.Unlock()
	if string(got) != string(hello) {
		t.Errorf("released with a hello of %d bytes, want the %d sent", len(got), len(hello))
	}
}
