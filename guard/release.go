//go:build linux

package guard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/leaderrun/leaderrun/locker"
)

// BackendHello is leaderrun's hello payload: the backend by name, the
// settings every backend shares, and the backend's own settings as its wire
// package defines them (locker/<backend>/<name>wire), which leaderrun
// writes and the guard's release for that backend reads.
type BackendHello struct {
	Backend  string          `json:"backend"`
	Options  locker.Options  `json:"options"`
	Settings json.RawMessage `json:"settings,omitempty"`
}

// ParseBackendHello reads a hello payload. Its Options name the slot held
// as the backend holds it, in Key (HelloOptions); the Options returned
// have the key in Key and the slot in Slot.
func ParseBackendHello(hello []byte) (BackendHello, error) {
	var h BackendHello
	if err := json.Unmarshal(hello, &h); err != nil {
		return h, fmt.Errorf("hello: %w", err)
	}
	if key, slot, ok := locker.SplitSlotKey(h.Options.Key); ok && h.Options.Slot == 0 {
		h.Options.Key, h.Options.Slot = key, slot
	}
	return h, nil
}

// HelloOptions are o as a hello carries them: the name the backend holds
// in Key, as every release of leaderrun and of the guard writes and
// reads it.
func HelloOptions(o locker.Options) locker.Options {
	o.Key, o.Slot = o.Name(), 0
	return o
}

// ErrNoDirectRelease says the backend's lease cannot be released by the
// guard itself; leaderrun must do it.
var ErrNoDirectRelease = errors.New("no direct release for this backend")

// releasers are the backends the guard gives back by itself, each added by
// the file that releases it (release_<backend>.go).
var releasers = map[string]func(ctx context.Context, h BackendHello, handle string) error{}

// DirectRelease gives up a lease with the standard library alone, without
// starting leaderrun: on etcd it revokes the lease through etcd's JSON
// gateway; on Consul it frees the key and destroys the session over the
// HTTP API; on ZooKeeper it closes the session with the client protocol's
// closeSession; on Kubernetes it clears the Lease's holder (when leaderrun
// passed the connection). Other backends return ErrNoDirectRelease. Errors
// never carry a password or token.
func DirectRelease(ctx context.Context, hello []byte, handle string) error {
	h, err := ParseBackendHello(hello)
	if err != nil {
		return err
	}
	release, ok := releasers[h.Backend]
	if !ok {
		return ErrNoDirectRelease
	}
	return release(ctx, h, handle)
}

// settingsOf decodes the backend's own settings of a hello into v.
func settingsOf(h BackendHello, v any) error {
	if len(h.Settings) == 0 {
		return nil
	}
	if err := json.Unmarshal(h.Settings, v); err != nil {
		return fmt.Errorf("%s: hello: %w", h.Backend, err)
	}
	return nil
}
