package locker

import "github.com/leaderrun/leaderrun/internal/retry"

// Backoff is retry.Backoff.
//
// Deprecated: use package internal/retry.
type Backoff = retry.Backoff

// Sleep is retry.Sleep.
//
// Deprecated: use package internal/retry.
var Sleep = retry.Sleep
