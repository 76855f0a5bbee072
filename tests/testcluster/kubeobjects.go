//go:build linux

package testcluster

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// kubeResources maps the kinds Apply creates (those of packaging/kubernetes
// and Secrets) to their API paths, %s standing for the namespace.
var kubeResources = map[string]string{
	"ServiceAccount": "/api/v1/namespaces/%s/serviceaccounts",
	"Secret":         "/api/v1/namespaces/%s/secrets",
	"Role":           "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/roles",
	"RoleBinding":    "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/rolebindings",
	"Deployment":     "/apis/apps/v1/namespaces/%s/deployments",
}

// CreateNamespace makes namespace ns, or fails the test.
func (k *Kube) CreateNamespace(t testing.TB, ns string) {
	t.Helper()
	body := fmt.Sprintf(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":%q}}`, ns)
	if code, out := k.Do(t, "POST", "/api/v1/namespaces", []byte(body)); code != 201 {
		t.Fatalf("testcluster: create namespace %s: %d %s", ns, code, out)
	}
}

// Apply creates every object of a multi-document YAML manifest in
// namespace ns, as kubectl apply would in an empty namespace. A kind it
// does not know, or a refusal, fails the test.
func (k *Kube) Apply(t testing.TB, ns string, manifest []byte) {
	t.Helper()
	for _, doc := range strings.Split(string(manifest), "\n---\n") {
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("testcluster: manifest: %v", err)
		}
		var head struct{ Kind string }
		if err := json.Unmarshal(js, &head); err != nil || head.Kind == "" {
			continue // comments only
		}
		path, ok := kubeResources[head.Kind]
		if !ok {
			t.Fatalf("testcluster: manifest: unexpected kind %s", head.Kind)
		}
		if code, body := k.Do(t, "POST", fmt.Sprintf(path, ns), js); code != 201 {
			t.Fatalf("testcluster: create %s: %d %s", head.Kind, code, body)
		}
	}
}

// CreateSecret makes an empty Secret named name in namespace ns, for
// ServiceAccountToken to bind a token to.
func (k *Kube) CreateSecret(t testing.TB, ns, name string) {
	t.Helper()
	k.Apply(t, ns, []byte(fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n", name)))
}

// ServiceAccountToken asks the TokenRequest API for a token of service
// account sa in namespace ns, bound to the Secret named bound when not
// empty (deleting the Secret then revokes the token).
func (k *Kube) ServiceAccountToken(t testing.TB, ns, sa, bound string) string {
	t.Helper()
	spec := `{"audiences":["https://kubernetes.default.svc"],"expirationSeconds":3600}`
	if bound != "" {
		code, out := k.Do(t, "GET", fmt.Sprintf("/api/v1/namespaces/%s/secrets/%s", ns, bound), nil)
		var secret struct{ Metadata struct{ UID string } }
		if code != 200 || json.Unmarshal(out, &secret) != nil {
			t.Fatalf("testcluster: get secret %s: %d %s", bound, code, out)
		}
		spec = fmt.Sprintf(`{"audiences":["https://kubernetes.default.svc"],"expirationSeconds":3600,"boundObjectRef":{"kind":"Secret","apiVersion":"v1","name":%q,"uid":%q}}`, bound, secret.Metadata.UID)
	}
	body := `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":` + spec + `}`
	code, out := k.Do(t, "POST", fmt.Sprintf("/api/v1/namespaces/%s/serviceaccounts/%s/token", ns, sa), []byte(body))
	var tr struct{ Status struct{ Token string } }
	if code != 201 || json.Unmarshal(out, &tr) != nil || tr.Status.Token == "" {
		t.Fatalf("testcluster: token request: %d %s", code, out)
	}
	return tr.Status.Token
}
