package kubernetes

import (
	"errors"
	"github.com/leaderrun/leaderrun/locker/kubernetes/kubewire"
	"net/http"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// Connection is how a Locker reaches its API server, as New resolved it
// from the kubeconfig or the pod's service account (kubewire, which the
// guard shares). leaderrun's dead-man guard uses it to give back a Lease
// without client-go. It holds secrets: never log it.
type Connection = kubewire.Connection

// Connection returns how the Locker reaches its API server. It fails, with
// a reason that names no secret, when the configuration needs more than TLS
// and a bearer token: an exec plugin or auth provider, basic auth,
// impersonation, a proxy, or a transport set in code.
func (l *Locker) Connection() (Connection, error) { return l.conn, l.connErr }

// connectionOf resolves rc (as loaded, before New adapts it) into a
// Connection.
func connectionOf(rc *rest.Config) (Connection, error) {
	switch {
	case rc.ExecProvider != nil:
		return Connection{}, errors.New("the credentials come from an exec plugin")
	case rc.AuthProvider != nil:
		return Connection{}, errors.New("the credentials come from an auth provider")
	case rc.Username != "" || rc.Password != "":
		return Connection{}, errors.New("the credentials are a user name and password")
	case rc.Impersonate.UserName != "" || rc.Impersonate.UID != "" || len(rc.Impersonate.Groups) > 0 || len(rc.Impersonate.Extra) > 0:
		return Connection{}, errors.New("the configuration impersonates another user")
	case rc.Proxy != nil:
		return Connection{}, errors.New("the configuration names a proxy")
	case rc.Transport != nil || rc.WrapTransport != nil || rc.Dial != nil:
		return Connection{}, errors.New("the configuration sets its own transport")
	}
	base, _, err := rest.DefaultServerURL(rc.Host, "", schema.GroupVersion{}, rest.IsConfigTransportTLS(*rc))
	if err != nil {
		return Connection{}, errors.New("the server address cannot be parsed")
	}
	// client-go goes through the proxy the environment names, if any.
	if p, err := http.ProxyFromEnvironment(&http.Request{URL: base}); err != nil || p != nil {
		return Connection{}, errors.New("the environment names a proxy for the server")
	}
	if base.Scheme != "https" && base.Scheme != "http" {
		return Connection{}, errors.New("the server address is neither https nor http")
	}
	server := (&url.URL{Scheme: base.Scheme, Host: base.Host, Path: strings.TrimSuffix(base.Path, "/")}).String()
	tc := rc.TLSClientConfig
	token := rc.BearerToken
	if rc.BearerTokenFile != "" {
		token = "" // the file wins, as in New
	}
	return Connection{
		Server:     server,
		CAData:     tc.CAData,
		CAFile:     tc.CAFile,
		CertData:   tc.CertData,
		KeyData:    tc.KeyData,
		CertFile:   tc.CertFile,
		KeyFile:    tc.KeyFile,
		Token:      token,
		TokenFile:  rc.BearerTokenFile,
		ServerName: tc.ServerName,
		Insecure:   tc.Insecure,
	}, nil
}
