// Package etcdwire is what leaderrun's dead-man guard needs to give back an
// etcd lease, with the standard library alone: the settings leaderrun
// hands it in its hello and the form of a lease handle. locker/etcd
// writes handles with it and the guard reads them with it, so the two
// cannot drift apart.
package etcdwire

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Hello is how to reach the cluster, as leaderrun's flags gave it. User
// is a user name alone (leaderrun splits --etcd-user USER:PASSWORD when it
// reads it). A password given by value travels in Password, over the
// guard's private pipe only; one given in a file travels as the file's
// name, PasswordFile, which the guard reads when it releases.
type Hello struct {
	Endpoints    []string      `json:"endpoints,omitempty"`
	User         string        `json:"user,omitempty"`
	Password     string        `json:"password,omitempty"`
	PasswordFile string        `json:"password_file,omitempty"`
	CACert       string        `json:"cacert,omitempty"`
	Cert         string        `json:"cert,omitempty"`
	Key          string        `json:"key,omitempty"`
	DialTimeout  time.Duration `json:"dial_timeout,omitempty"`
}

// Handle names a lease and the election key it keeps alive:
// "<lease id in hex>:<key>". The key ends in the same hex id.
func Handle(id int64, key string) string { return fmt.Sprintf("%x:%s", id, key) }

// ParseHandle undoes Handle.
func ParseHandle(handle string) (id int64, key string, err error) {
	hex, key, ok := strings.Cut(handle, ":")
	id, err = strconv.ParseInt(hex, 16, 64)
	if !ok || err != nil || id <= 0 || !strings.HasSuffix(key, hex) {
		return 0, "", fmt.Errorf("%q is not an etcd lease handle", handle)
	}
	return id, key, nil
}
