package locker

import "fmt"

// ConfigError is the one shape every backend gives a setting it refuses:
// Field names the setting in the library's terms (the Config field, e.g.
// "TTL" or "Endpoints"), Rule says what it must be. It wraps ErrRefused, so
// retrying stops and leaderrun exits 125; main maps Field to the flag the
// user typed, so library code never prints flag names.
type ConfigError struct {
	Field string
	Rule  string
	Err   error // the underlying cause, if any
}

// Error returns "Field: Rule" (and the cause).
func (e *ConfigError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Field, e.Rule, e.Err)
	}
	return e.Field + ": " + e.Rule
}

// Unwrap lets errors.Is find both ErrRefused and the cause.
func (e *ConfigError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrRefused, e.Err}
	}
	return []error{ErrRefused}
}
