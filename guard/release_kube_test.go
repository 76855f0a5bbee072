//go:build linux

package guard

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker/kubernetes/kubewire"
	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// kubeServer is a kube-apiserver shared by the subtests of one test.
type kubeServer struct {
	k     *testcluster.Kube
	admin string // KubeAdmin's token
	https *http.Transport
	seq   atomic.Int64
}

func startKubeServer(t *testing.T) *kubeServer {
	t.Helper()
	e := testcluster.StartEtcd(t, 1)
	k := testcluster.StartKube(t, e, testcluster.KubeUser{Name: "nobody"})
	pem, err := os.ReadFile(k.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &kubeServer{k: k, admin: k.Token(testcluster.KubeAdmin), https: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

const leasesPath = "/apis/coordination.k8s.io/v1/namespaces/default/leases"

// hold creates a Lease held by holder under term, with the annotations of
// a leaderrun holder, and returns its name.
func (s *kubeServer) hold(t *testing.T, holder, term string) string {
	t.Helper()
	name := fmt.Sprintf("guard-%d", s.seq.Add(1))
	lease := map[string]any{
		"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
		"metadata": map[string]any{"name": name, "annotations": map[string]string{
			"leaderrun/key": "k", "leaderrun/term": term, "leaderrun/host": "h", "leaderrun/pid": "1",
			"leaderrun/version": "v", "leaderrun/contract": "c", "leaderrun/ttl": "3s", "leaderrun/epoch": "7",
			"leaderrun/previous-epoch": "5", "someone.else/note": "kept",
		}},
		"spec": map[string]any{"holderIdentity": holder, "leaseDurationSeconds": 3, "leaseTransitions": 2,
			"acquireTime": "2026-01-01T00:00:00.000000Z", "renewTime": "2026-01-01T00:00:01.000000Z"},
	}
	body, _ := json.Marshal(lease)
	if code, out := s.k.Do(t, "POST", leasesPath, body); code != 201 {
		t.Fatalf("create Lease: %d %s", code, out)
	}
	return name
}

// leaseObj is a Lease as the server returns it.
type leaseObj struct {
	Metadata struct {
		ResourceVersion string            `json:"resourceVersion"`
		Annotations     map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec map[string]any `json:"spec"`
}

func (s *kubeServer) get(t *testing.T, name string) (leaseObj, []byte) {
	t.Helper()
	code, out := s.k.Do(t, "GET", leasesPath+"/"+name, nil)
	if code != 200 {
		t.Fatalf("get Lease %s: %d %s", name, code, out)
	}
	var l leaseObj
	if err := json.Unmarshal(out, &l); err != nil {
		t.Fatal(err)
	}
	return l, out
}

// hello is the guard's hello for this server with the admin's token.
func (s *kubeServer) hello(mods ...func(*kubewire.Connection)) []byte {
	h := kubewire.Connection{Server: s.k.URL(), CAFile: s.k.CAFile(), Token: s.admin}
	for _, m := range mods {
		m(&h)
	}
	settings, _ := json.Marshal(kubewire.Hello{Conn: &h})
	b, _ := json.Marshal(BackendHello{Backend: "kubernetes", Settings: settings})
	return b
}

func kubeCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantReleased checks the Lease has no holder and kept what a release
// keeps: the key, the epochs, others' annotations, the transitions.
func wantReleased(t *testing.T, l leaseObj) {
	t.Helper()
	for _, f := range []string{"holderIdentity", "acquireTime", "renewTime"} {
		if v, ok := l.Spec[f]; ok {
			t.Errorf("spec.%s = %v after release, want none", f, v)
		}
	}
	for _, a := range kubewire.Released {
		if v, ok := l.Metadata.Annotations[a]; ok {
			t.Errorf("annotation %s = %q after release, want none", a, v)
		}
	}
	for a, want := range map[string]string{"leaderrun/key": "k", "leaderrun/epoch": "7", "leaderrun/previous-epoch": "5", "someone.else/note": "kept"} {
		if got := l.Metadata.Annotations[a]; got != want {
			t.Errorf("annotation %s = %q after release, want %q", a, got, want)
		}
	}
	if l.Metadata.Annotations[kubewire.AnnReleased] == "" {
		t.Errorf("no release marker (%s) after release", kubewire.AnnReleased)
	}
	if l.Spec["leaseTransitions"] != float64(2) || l.Spec["leaseDurationSeconds"] != float64(3) {
		t.Errorf("spec after release %v, want leaseTransitions and leaseDurationSeconds kept", l.Spec)
	}
}

func wantHeld(t *testing.T, l leaseObj, holder, term string) {
	t.Helper()
	if l.Spec["holderIdentity"] != holder || l.Metadata.Annotations["leaderrun/term"] != term {
		t.Errorf("Lease held by %v term %q, want %s term %s", l.Spec["holderIdentity"], l.Metadata.Annotations["leaderrun/term"], holder, term)
	}
}

// TestDirectReleaseKubernetes releases Leases through a real API server
// over TLS, as leaderrun-guard does once leaderrun is dead.
func TestDirectReleaseKubernetes(t *testing.T) {
	s := startKubeServer(t)
	admin := s.k.Token(testcluster.KubeAdmin)
	caPEM, err := os.ReadFile(s.k.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")

	for _, tc := range []struct {
		name string
		mod  func(*kubewire.Connection)
	}{
		{"inline token, CA file", func(*kubewire.Connection) {}},
		{"inline token, CA data", func(h *kubewire.Connection) { h.CAFile, h.CAData = "/nonexistent", caPEM }},
		{"token file", func(h *kubewire.Connection) { h.Token, h.TokenFile = "", tokenFile }},
		{"server name", func(h *kubewire.Connection) { h.ServerName = "kubernetes.default.svc" }},
		{"insecure", func(h *kubewire.Connection) { h.CAFile, h.Insecure = "", true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(tokenFile, []byte(admin+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			name := s.hold(t, "host-a", "term-a")
			handle := "default/" + name + "/term-a"
			for i := range 2 { // the second finds nothing to do
				if err := DirectRelease(kubeCtx(t), s.hello(tc.mod), handle); err != nil {
					t.Fatalf("release %d: %v", i+1, err)
				}
			}
			l, _ := s.get(t, name)
			wantReleased(t, l)
		})
	}

	// The token file is read at release time: a token rotated after
	// leaderrun started is the one used.
	t.Run("token file rotated", func(t *testing.T) {
		name := s.hold(t, "host-a", "term-a")
		if err := os.WriteFile(tokenFile, []byte("stale-token-value\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		hello := s.hello(func(h *kubewire.Connection) { h.Token, h.TokenFile = "", tokenFile })
		err := DirectRelease(kubeCtx(t), hello, "default/"+name+"/term-a")
		if err == nil || !strings.Contains(err.Error(), "401") {
			t.Fatalf("release with a stale token file: %v, want 401", err)
		}
		if strings.Contains(err.Error(), "stale-token-value") {
			t.Errorf("error shows the token: %v", err)
		}
		if err := os.WriteFile(tokenFile, []byte(admin+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := DirectRelease(kubeCtx(t), hello, "default/"+name+"/term-a"); err != nil {
			t.Fatalf("release after the token file was rotated: %v", err)
		}
		l, _ := s.get(t, name)
		wantReleased(t, l)
	})

	t.Run("refusals", func(t *testing.T) {
		name := s.hold(t, "host-a", "term-a")
		handle := "default/" + name + "/term-a"
		nobody := s.k.Token("nobody")
		for what, mod := range map[string]func(*kubewire.Connection){
			"unknown CA":        func(h *kubewire.Connection) { h.CAFile = "" },
			"wrong server name": func(h *kubewire.Connection) { h.ServerName = "wrong.example" },
			"forbidden user":    func(h *kubewire.Connection) { h.Token = nobody },
			"unknown token":     func(h *kubewire.Connection) { h.Token = "unknown-token-value" },
		} {
			err := DirectRelease(kubeCtx(t), s.hello(mod), handle)
			if err == nil {
				t.Errorf("%s: release succeeded", what)
				continue
			}
			t.Logf("%s: %v", what, err)
			if strings.Contains(err.Error(), nobody) || strings.Contains(err.Error(), "unknown-token-value") || strings.Contains(err.Error(), admin) {
				t.Errorf("%s: error shows a token: %v", what, err)
			}
		}
		l, _ := s.get(t, name)
		wantHeld(t, l, "host-a", "term-a")
	})

	// A Lease held by another term (a standby took over, the holder moved
	// on) is not ours to release: it is left exactly as it is.
	t.Run("term no longer ours", func(t *testing.T) {
		name := s.hold(t, "host-b", "term-b")
		before, _ := s.get(t, name)
		if err := DirectRelease(kubeCtx(t), s.hello(), "default/"+name+"/term-a"); err != nil {
			t.Fatalf("release: %v", err)
		}
		after, _ := s.get(t, name)
		if after.Metadata.ResourceVersion != before.Metadata.ResourceVersion {
			t.Errorf("Lease written (resourceVersion %s -> %s) although its term is not ours", before.Metadata.ResourceVersion, after.Metadata.ResourceVersion)
		}
		wantHeld(t, after, "host-b", "term-b")
	})

	// A Lease deleted by hand is created again, released by the term, so
	// that a standby waiting the holder out as a silent one takes it now;
	// one whose holder was cleared by hand gets the marker too.
	t.Run("Lease gone", func(t *testing.T) {
		if err := DirectRelease(kubeCtx(t), s.hello(), "default/no-such-lease/term-a"); err != nil {
			t.Fatalf("release of a missing Lease: %v", err)
		}
		l, _ := s.get(t, "no-such-lease")
		if l.Spec["holderIdentity"] != nil || l.Metadata.Annotations[kubewire.AnnReleased] != "term-a" {
			t.Fatalf("Lease after the release of a deleted one: holder %v, annotations %v; want free, released by term-a",
				l.Spec["holderIdentity"], l.Metadata.Annotations)
		}
	})
	t.Run("holder cleared by hand", func(t *testing.T) {
		name := s.hold(t, "host-a", "term-a")
		if err := s.otherWrite(name, func(obj map[string]any) { delete(obj["spec"].(map[string]any), "holderIdentity") }); err != nil {
			t.Fatal(err)
		}
		if err := DirectRelease(kubeCtx(t), s.hello(), "default/"+name+"/term-a"); err != nil {
			t.Fatalf("release: %v", err)
		}
		l, _ := s.get(t, name)
		if got := l.Metadata.Annotations[kubewire.AnnReleased]; got != "term-a" {
			t.Fatalf("release marker %q, want term-a", got)
		}
	})

	t.Run("bad handle", func(t *testing.T) {
		for _, h := range []string{"", "default/x", "default/x/", "a/b/c/d"} {
			if err := DirectRelease(kubeCtx(t), s.hello(), h); err == nil {
				t.Errorf("handle %q accepted", h)
			}
		}
	})

	t.Run("no connection: leaderrun releases", func(t *testing.T) {
		err := DirectRelease(kubeCtx(t), []byte(`{"backend":"kubernetes"}`), "default/x/t")
		if err != ErrNoDirectRelease {
			t.Fatalf("release without a server: %v, want ErrNoDirectRelease", err)
		}
	})
}

// interposer is a plain-HTTP proxy in front of the API server that calls
// before(n) ahead of the n-th PUT it forwards, as if another writer's
// update landed between the guard's read and its write. It returns the
// proxy's URL and the count of PUTs.
func (s *kubeServer) interposer(t *testing.T, before func(n int) error) (string, *atomic.Int32) {
	t.Helper()
	u, err := url.Parse(s.k.URL())
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = s.https
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "PUT" {
			if err := before(int(n.Add(1))); err != nil {
				t.Errorf("the other writer: %v", err)
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &n
}

// otherWrite updates the Lease with change applied, as another writer;
// it may run outside the test's goroutine.
func (s *kubeServer) otherWrite(name string, change func(obj map[string]any)) error {
	tc := &http.Client{Timeout: 10 * time.Second, Transport: s.https}
	do := func(method string, body []byte) ([]byte, error) {
		req, err := http.NewRequest(method, s.k.URL()+leasesPath+"/"+name, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+s.admin)
		resp, err := tc.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != 200 {
			err = fmt.Errorf("%s: %d %s", method, resp.StatusCode, out)
		}
		return out, err
	}
	raw, err := do("GET", nil)
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return err
	}
	change(obj)
	body, _ := json.Marshal(obj)
	_, err = do("PUT", body)
	return err
}

func annotate(key, value string) func(map[string]any) {
	return func(obj map[string]any) {
		obj["metadata"].(map[string]any)["annotations"].(map[string]any)[key] = value
	}
}

// TestDirectReleaseKubernetesConflict has another writer update the Lease
// between the guard's read and its write: the guard reads again and
// releases if the term is still its own, gives up the write if it is not,
// and stops after three conflicting writes.
func TestDirectReleaseKubernetesConflict(t *testing.T) {
	s := startKubeServer(t)
	viaProxy := func(proxy string) []byte {
		return s.hello(func(h *kubewire.Connection) { h.Server, h.CAFile = proxy, "" })
	}

	t.Run("term still ours", func(t *testing.T) {
		name := s.hold(t, "host-a", "term-a")
		proxy, puts := s.interposer(t, func(n int) error {
			if n > 1 {
				return nil
			}
			return s.otherWrite(name, annotate("someone.else/edit", "1"))
		})
		if err := DirectRelease(kubeCtx(t), viaProxy(proxy), "default/"+name+"/term-a"); err != nil {
			t.Fatalf("release: %v", err)
		}
		if puts.Load() != 2 {
			t.Errorf("%d writes, want 2 (a conflict, then the release)", puts.Load())
		}
		l, _ := s.get(t, name)
		wantReleased(t, l)
		if l.Metadata.Annotations["someone.else/edit"] != "1" {
			t.Errorf("the other writer's edit was lost: %v", l.Metadata.Annotations)
		}
	})

	t.Run("taken over in between", func(t *testing.T) {
		name := s.hold(t, "host-a", "term-a")
		proxy, puts := s.interposer(t, func(n int) error {
			if n > 1 {
				return nil
			}
			return s.otherWrite(name, func(obj map[string]any) {
				obj["spec"].(map[string]any)["holderIdentity"] = "host-b"
				annotate("leaderrun/term", "term-b")(obj)
			})
		})
		if err := DirectRelease(kubeCtx(t), viaProxy(proxy), "default/"+name+"/term-a"); err != nil {
			t.Fatalf("release: %v", err)
		}
		if puts.Load() != 1 {
			t.Errorf("%d writes attempted, want 1", puts.Load())
		}
		l, _ := s.get(t, name)
		wantHeld(t, l, "host-b", "term-b")
	})

	t.Run("conflicts keep coming", func(t *testing.T) {
		name := s.hold(t, "host-a", "term-a")
		proxy, puts := s.interposer(t, func(n int) error {
			return s.otherWrite(name, annotate("someone.else/edit", strconv.Itoa(n)))
		})
		err := DirectRelease(kubeCtx(t), viaProxy(proxy), "default/"+name+"/term-a")
		if err == nil || !strings.Contains(err.Error(), "conflicting writes kept coming") {
			t.Fatalf("release: %v, want conflicting writes kept coming", err)
		}
		if puts.Load() != kubeAttempts {
			t.Errorf("%d writes, want %d", puts.Load(), kubeAttempts)
		}
		l, _ := s.get(t, name)
		wantHeld(t, l, "host-a", "term-a")
	})
}

// TestDirectReleaseKubernetesClientCert authenticates the guard by a
// client certificate, from files and inline.
func TestDirectReleaseKubernetesClientCert(t *testing.T) {
	s := startKubeServer(t)
	certFile, keyFile := s.k.ClientCert(t, "cert-admin", "system:masters")
	cert, _ := os.ReadFile(certFile)
	key, _ := os.ReadFile(keyFile)
	for name, mod := range map[string]func(*kubewire.Connection){
		"files":  func(h *kubewire.Connection) { h.Token, h.CertFile, h.KeyFile = "", certFile, keyFile },
		"inline": func(h *kubewire.Connection) { h.Token, h.CertData, h.KeyData = "", cert, key },
	} {
		t.Run(name, func(t *testing.T) {
			lease := s.hold(t, "host-a", "term-a")
			if err := DirectRelease(kubeCtx(t), s.hello(mod), "default/"+lease+"/term-a"); err != nil {
				t.Fatalf("release: %v", err)
			}
			l, _ := s.get(t, lease)
			wantReleased(t, l)
		})
	}
	t.Run("no credentials", func(t *testing.T) {
		lease := s.hold(t, "host-a", "term-a")
		err := DirectRelease(kubeCtx(t), s.hello(func(h *kubewire.Connection) { h.Token = "" }), "default/"+lease+"/term-a")
		if err == nil {
			t.Fatal("an anonymous release succeeded")
		}
		t.Logf("anonymous: %v", err)
		l, _ := s.get(t, lease)
		wantHeld(t, l, "host-a", "term-a")
	})
}
