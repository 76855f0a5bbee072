// Package kubewire is what leaderrun's dead-man guard needs to clear a
// Kubernetes Lease, with the standard library alone: the settings and
// connection leaderrun hands it in its hello, the form of a lease handle
// and the annotations a release removes. locker/kubernetes uses the same
// definitions, so the guard's release and leaderrun's own stay alike.
package kubewire

import (
	"fmt"
	"strings"
)

// Hello is the Lease's place and how to reach the API server. Conn is
// set only when a plain HTTPS client can act as leaderrun's user (no exec
// plugin or auth provider); without it the guard is leaderrun itself.
type Hello struct {
	Namespace  string      `json:"namespace,omitempty"`
	Kubeconfig string      `json:"kubeconfig,omitempty"`
	Context    string      `json:"context,omitempty"`
	Conn       *Connection `json:"conn,omitempty"`
}

// Connection is how a Locker reaches its API server, as the kubeconfig or
// the pod's service account resolved it: enough for a plain HTTPS client
// to make the same requests as the same user. It holds secrets (a token,
// a private key): never log it.
type Connection struct {
	// Server is the base URL of the API server, with its path prefix if
	// it has one (https://host:port/prefix, no trailing slash).
	Server string `json:"server"`

	// CAData is the PEM bundle that verifies the server; CAFile the file
	// holding it. Neither: the system's roots.
	CAData []byte `json:"ca_data,omitempty"`
	CAFile string `json:"ca_file,omitempty"`

	// CertData and KeyData, or CertFile and KeyFile, are the client's
	// certificate and key, PEM-encoded.
	CertData []byte `json:"cert_data,omitempty"`
	KeyData  []byte `json:"key_data,omitempty"`
	CertFile string `json:"cert_file,omitempty"`
	KeyFile  string `json:"key_file,omitempty"`

	// Token is a bearer token; TokenFile a file holding one, to be read at
	// each use (the kubelet rotates a pod's token).
	Token     string `json:"token,omitempty"`
	TokenFile string `json:"token_file,omitempty"`

	// ServerName overrides the name the server's certificate is checked
	// against; Insecure skips that check (kubeconfig's
	// insecure-skip-tls-verify).
	ServerName string `json:"server_name,omitempty"`
	Insecure   bool   `json:"insecure,omitempty"`
}

// Annotations of leaderrun's holder record on a Lease.
const (
	AnnPrefix   = "leaderrun/"
	AnnKey      = AnnPrefix + "key"            // the key, as given (the name is its encoding)
	AnnContract = AnnPrefix + "contract"       // observe.Contract: standbys may take over by observation
	AnnTTL      = AnnPrefix + "ttl"            // the holder's TTL, a Go duration
	AnnTerm     = AnnPrefix + "term"           // random: tells this leadership from any other
	AnnEpoch    = AnnPrefix + "epoch"          // the holder's epoch, written by its first renewal
	AnnPrevious = AnnPrefix + "previous-epoch" // the epoch of the holder before
	AnnHost     = AnnPrefix + "host"
	AnnPID      = AnnPrefix + "pid"
	AnnVersion  = AnnPrefix + "version"
	// AnnReleased is the term of the holder whose own release, made once
	// its job was gone, left the Lease free. A standby that saw that term
	// hold the Lease takes it at once; a Lease deleted, emptied or edited
	// any other way is that holder gone silent (DESIGN §1.12, "A record
	// edited by hand"). A claim removes it.
	AnnReleased = AnnPrefix + "released"
)

// Released are the annotations a release removes with the holder; the key
// and the epochs stay, so that the next holder can check its epoch is
// greater.
var Released = []string{AnnTerm, AnnHost, AnnPID, AnnVersion, AnnContract, AnnTTL}

// Marks reports whether the release of the leadership term, its job gone,
// writes its marker on a Lease with this holder and these annotations: one
// it still holds, or one left free by anything but a release (deleted and
// re-created empty, its holder cleared by hand). The marker only frees the
// Lease for standbys that saw this term hold it, so marking a free Lease
// is harmless; a Lease another term holds, or that another holder's
// release left free, is left alone.
func Marks(holder string, ann map[string]string, term string) bool {
	if holder != "" {
		return ann[AnnTerm] == term
	}
	return ann[AnnReleased] == ""
}

// Handle names one leadership of a Lease: "<namespace>/<name>/<term>".
func Handle(namespace, name, term string) string { return namespace + "/" + name + "/" + term }

// ParseHandle undoes Handle.
func ParseHandle(handle string) (namespace, name, term string, err error) {
	parts := strings.Split(handle, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", "", fmt.Errorf("%q is not a kubernetes lease handle", handle)
	}
	return parts[0], parts[1], parts[2], nil
}
