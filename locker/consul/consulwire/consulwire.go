// Package consulwire is what leaderrun's dead-man guard needs to give back a
// Consul session, with the standard library alone: the settings leaderrun
// hands it in its hello and the form of a lease handle. locker/consul
// writes handles with it and the guard reads them with it.
package consulwire

import (
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
