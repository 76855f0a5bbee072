package kubernetes

import (
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// connectionOf on configurations New may load: the in-cluster one (a
// token file), a host without a scheme, and those a plain HTTPS client
// cannot serve; a refusal never quotes a secret.
func TestConnectionOf(t *testing.T) {
	inCluster := &rest.Config{Host: "https://10.0.0.1:443", BearerToken: "read-once", BearerTokenFile: "/var/run/secrets/kubernetes.io/serviceaccount/token",
		TLSClientConfig: rest.TLSClientConfig{CAFile: "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"}}
	c, err := connectionOf(inCluster)
	if err != nil {
		t.Fatal(err)
	}
	if c.Server != "https://10.0.0.1:443" || c.TokenFile != inCluster.BearerTokenFile || c.Token != "" || c.CAFile != inCluster.TLSClientConfig.CAFile {
		t.Errorf("in-cluster connection %+v: want the server, the CA file and the token file (not the token read once)", c)
	}
	for host, want := range map[string]string{
		"127.0.0.1:6443":                   "https://127.0.0.1:6443", // TLS settings: https
		"https://h.example:8443/prefix/":   "https://h.example:8443/prefix",
		"https://h.example/k8s/clusters/x": "https://h.example/k8s/clusters/x",
	} {
		c, err := connectionOf(&rest.Config{Host: host, TLSClientConfig: rest.TLSClientConfig{CAData: []byte("x")}})
		if err != nil || c.Server != want {
			t.Errorf("host %q: server %q, %v; want %q", host, c.Server, err, want)
		}
	}
	for name, rc := range map[string]*rest.Config{
		"exec plugin":   {Host: "https://h", BearerToken: "secret-token", ExecProvider: &clientcmdapi.ExecConfig{Command: "x"}},
		"auth provider": {Host: "https://h", AuthProvider: &clientcmdapi.AuthProviderConfig{Name: "oidc"}},
		"basic auth":    {Host: "https://h", Username: "u", Password: "secret-password"},
		"impersonation": {Host: "https://h", BearerToken: "secret-token", Impersonate: rest.ImpersonationConfig{UserName: "other"}},
	} {
		_, err := connectionOf(rc)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the reason quotes a secret: %v", name, err)
		}
	}
}
