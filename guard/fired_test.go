//go:build linux

package guard

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// firedWatcher is the guard's reply pipe as the test sees it: it notes
// whether the job was still alive when "fired" was written.
type firedWatcher struct {
	mu          sync.Mutex
	j           Job
	said        strings.Builder
	aliveAtFire bool
}

func (w *firedWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if string(p) == verbFired+"\n" {
		w.aliveAtFire = alive(w.j)
	}
	w.said.Write(p)
	return len(p), nil
}

func (w *firedWatcher) replies() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.said.String()
}

// The guard says "fired" before it kills: a leaderrun that sees its job
// dead and then reads the pipe finds why (DESIGN §1.9). Once fired it stays
// fired: an extension does not bring the term back, a job watched later
// (leaderrun had not read "fired" yet when it started one) dies at once,
// and the lease is released once.
func TestFiredComesBeforeTheKillAndEndsTheTerm(t *testing.T) {
	first := job(t)
	w := &firedWatcher{j: first}
	r, pw := io.Pipe()
	var releases int
	var mu sync.Mutex
	release := func(context.Context, []byte, string) error {
		mu.Lock()
		defer mu.Unlock()
		releases++
		return nil
	}
	code := make(chan int, 1)
	go func() { code <- Run(r, w, release, nullLog{}) }()
	send := func(msg string) {
		t.Helper()
		if _, err := pw.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	send(Hello([]byte(`{}`)) + Lease("h") + Watch(MonoNow()+int64(100*time.Millisecond), first))
	waitGone(t, first, 5*time.Second)
	waitReplies(t, w, "fired\nreleased\n")
	w.mu.Lock()
	aliveAtFire := w.aliveAtFire
	w.mu.Unlock()
	if !aliveAtFire {
		t.Error(`"fired" was written after the job was killed, want before`)
	}

	// Too late: an extension after the kill point passed, then a new run.
	send(Extend(MonoNow() + int64(time.Hour)))
	second := job(t)
	watched := time.Now()
	send(Watch(MonoNow()+int64(time.Hour), second))
	waitGone(t, second, 2*time.Second)
	if took := time.Since(watched); took > time.Second {
		t.Errorf("a job watched after the guard fired lived %v, want killed at once", took)
	}
	send(Done())
	_ = pw.Close()
	select {
	case <-code:
	case <-time.After(10 * time.Second):
		t.Fatal("guard did not exit")
	}
	if got := w.replies(); got != "fired\nreleased\n" {
		t.Errorf("replies %q, want one fired and one released", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if releases != 1 {
		t.Errorf("released %d times, want once", releases)
	}
}

func waitReplies(t *testing.T, w *firedWatcher, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for w.replies() != want {
		if time.Now().After(deadline) {
			t.Fatalf("replies %q, want %q", w.replies(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// HasFired reads the pipe itself: once the guard has written "fired", the
// supervisor's next HasFired says so, whether or not the goroutine that
// reads the replies has run since.
func TestHasFiredSeesWhatTheGuardWrote(t *testing.T) {
	dir := t.TempDir()
	said := filepath.Join(dir, "said")
	// A stand-in guard: says "fired" at once, then sleeps on its input.
	spec := &Spec{Path: "/bin/sh", Args: []string{"sh", "-c", `printf 'fir' >&3; printf 'ed\n' >&3; : > "$SAID"; exec cat >/dev/null`},
		Env: append(os.Environ(), "SAID="+said)}
	for i := range 20 {
		_ = os.Remove(said)
		p, err := Start(spec, "h", nil, testStarter, nullLog{})
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			if _, err := os.Stat(said); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the stand-in guard never said fired")
			}
			time.Sleep(time.Millisecond)
		}
		if !p.HasFired() {
			t.Fatalf("run %d: HasFired false after the guard wrote fired", i)
		}
		select {
		case <-p.Fired():
		default:
			t.Fatalf("run %d: Fired not closed once HasFired said true", i)
		}
		p.Stop()
	}
}

// testStarter forks and reaps one process, as leaderrun's reaper does.
func testStarter(fork func() (int, error), done func(syscall.WaitStatus)) (int, error) {
	pid, err := fork()
	if err != nil {
		return 0, err
	}
	go func() {
		var ws syscall.WaitStatus
		for {
			if _, err := syscall.Wait4(pid, &ws, 0, nil); err != syscall.EINTR {
				break
			}
		}
		done(ws)
	}()
	return pid, nil
}
