// Package consulwire is what leaderrun's dead-man guard needs to give back a
// Consul session, with the standard library alone: the settings leaderrun
// hands it in its hello and the form of a lease handle. locker/consul
// writes handles with it and the guard reads them with it.
package consulwire

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Hello is how to reach Consul, as leaderrun's flags gave it. It may hold
// a token: it travels only over the guard's private pipe.
type Hello struct {
	Address       string `json:"address,omitempty"`
	Token         string `json:"token,omitempty"`
	TokenFile     string `json:"token_file,omitempty"`
	CACert        string `json:"ca_file,omitempty"`
	ClientCert    string `json:"client_cert,omitempty"`
	ClientKey     string `json:"client_key,omitempty"`
	TLSServerName string `json:"tls_server_name,omitempty"`
	Datacenter    string `json:"datacenter,omitempty"`
}

// DefaultAddress is the agent consul/api talks to when nothing names one.
const DefaultAddress = "127.0.0.1:8500"

// handlePrefix starts every handle, so that one cannot be taken for
// another backend's.
const handlePrefix = "consul:"

// Handle names a session and the KV path of the key it holds.
func Handle(session, key string) string { return handlePrefix + session + ":" + key }

// ParseHandle undoes Handle. Neither session IDs nor keys contain ':'
// (locker.ValidateKey).
func ParseHandle(handle string) (session, key string, err error) {
	rest, ok := strings.CutPrefix(handle, handlePrefix)
	if ok {
		session, key, ok = strings.Cut(rest, ":")
	}
	if !ok || session == "" || key == "" || strings.ContainsAny(session, "/?#") {
		return "", "", fmt.Errorf("%q is not a consul lease handle", handle)
	}
	return session, key, nil
}

// released is the value a holder's release leaves on the lock key.
type released struct {
	Released string `json:"released"`
}

// Released is the value a holder's release writes on the lock key as it
// frees it, once its job is gone: it names the session that held the key.
// A standby that saw that session hold the key takes the key at once; a
// key freed or deleted any other way (by hand, or because Consul ended
// the session) is a holder gone silent, waited out on the standby's own
// clock (DESIGN §1.12, "A record edited by hand").
func Released(session string) []byte {
	b, _ := json.Marshal(released{Released: session}) // a string cannot fail
	return b
}

// ReleasedBy returns the session a value written by Released names; empty
// for any other value.
func ReleasedBy(value []byte) string {
	var r released
	if len(value) == 0 || value[0] != '{' || json.Unmarshal(value, &r) != nil {
		return ""
	}
	return r.Released
}

// Marks reports whether a release whose session no longer holds the key
// writes its marker on the key as read (session holding it, value): a key
// left free by anything but a release (its holder's session destroyed, or
// the key released, by hand) is. The marker only frees the key for
// standbys that saw that session hold it, so marking a free key is
// harmless; a key another session holds, or that another holder's release
// left free, is left alone. An absent key is marked with a create.
func Marks(holder string, value []byte) bool {
	return holder == "" && ReleasedBy(value) == ""
}
