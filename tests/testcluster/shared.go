//go:build linux

package testcluster

import (
	"sync"
	"testing"
)

// sharedServer is one server for the whole test binary, started by the
// first test that asks and stopped from TestMain (SharedPostgres,
// SharedDynalite). A start that failed fails every later ask the same way.
type sharedServer[T interface{ close() }] struct {
	mu      sync.Mutex
	srv     T
	started bool
	err     error
}

// get returns the server, starting it with start on the first call.
func (s *sharedServer[T]) get(t testing.TB, start func() (T, error)) T {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started && s.err == nil {
		if s.srv, s.err = start(); s.err == nil {
			s.started = true
		}
	}
	if s.err != nil {
		t.Fatalf("testcluster: %v", s.err)
	}
	return s.srv
}

// stop stops the server, if one was started.
func (s *sharedServer[T]) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		s.srv.close()
		var zero T
		s.srv, s.started = zero, false
	}
}
