package locker

import "sync"

// LostSignal is the Lost and LostReason half of a Lease: a channel closed
// once, when leadership is seen gone, and the first reason given. Backends
// embed it; its zero value is ready to use and it is safe for concurrent use.
type LostSignal struct {
	mu     sync.Mutex
	ch     chan struct{}
	closed bool
	reason string
}

// Lost is closed once Mark has been called; it never reopens.
func (s *LostSignal) Lost() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// LostReason is the reason given to the first Mark; empty before.
func (s *LostSignal) LostReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}

// Mark closes Lost with reason. Only the first call counts; it reports
// whether this call was it, so the caller logs a loss once.
func (s *LostSignal) Mark(reason string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	s.closed, s.reason = true, reason
	close(s.ch)
	return true
}
