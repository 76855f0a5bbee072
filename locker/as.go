package locker

import "time"

// As returns the first layer of lk that is a T, looking from the outside
// in: lk itself, then what its Unwrap() Locker method returns, and so on.
// It is the one way to ask a Locker for a capability beyond Locker, so
// that a wrapper such as OneAttempt hides none of the backend's: T is one
// of the capability interfaces below, RunLog, or a backend's concrete type
// (*kubernetes.Locker). Every wrapper of a Locker must implement
// Unwrap() Locker.
func As[T any](lk Locker) (T, bool) {
	for lk != nil {
		if t, ok := lk.(T); ok {
			return t, true
		}
		u, ok := lk.(interface{ Unwrap() Locker })
		if !ok {
			break
		}
		lk = u.Unwrap()
	}
	var zero T
	return zero, false
}

// HostLocal is the capability of a backend whose keys live on this host
// alone, with no server to reach (the local lock-file backend): it answers
// as soon as it is built, so readiness needs no probe of it.
type HostLocal interface {
	// LockDir is the lock directory the backend was configured with.
	LockDir() string
}

// Targeter is the capability of a backend that names what a single
// attempt (--no-wait, OneAttempt) talks to and how long that may take
// (ZooKeeper: the ensemble; Kubernetes: the API server).
type Targeter interface {
	Target() (addr string, timeout time.Duration)
}
