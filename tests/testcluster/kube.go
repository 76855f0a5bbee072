//go:build linux

package testcluster

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// KubeUser is a test identity that StartKube writes into the API server's
// token file; Kube.Token returns its bearer token.
type KubeUser struct {
	Name   string
	Groups []string
}

// KubeAdmin is the user StartKube always creates: a member of
// system:masters, which RBAC lets do anything.
const KubeAdmin = "leaderrun-test-admin"

// Kube is a kube-apiserver started by StartKube, serving on 127.0.0.1 with
// RBAC on, backed by an etcd cluster from StartEtcd. Its methods report
// failures through the test that started it, so call them from that test's
// goroutine.
type Kube struct {
	t      testing.TB
	etcd   *Etcd
	dir    string
	port   int
	tokens map[string]string // user name -> bearer token
	proc   *proc
	client *http.Client
	ca     *testsupport.CA // signs the client certificates the server accepts
}

// StartKube starts kube-apiserver against etcd (which must keep running)
// and returns once its /readyz answers ok. It serves HTTPS on a free
// 127.0.0.1 port with a self-signed certificate (see CAFile), authenticates
// the given users and KubeAdmin by static bearer tokens and anyone by a
// client certificate from ClientCert, authorises with RBAC only, and
// issues service-account tokens with a key pair made here.
// The service CIDR is a flag value only: no traffic goes there. Logs live in
// t.TempDir(); the server is killed when the test ends, and its log is
// printed if the test failed.
func StartKube(t testing.TB, etcd *Etcd, users ...KubeUser) *Kube {
	t.Helper()
	bin := Bin(t, "kube-apiserver")
	for attempt := 1; ; attempt++ {
		k, err := startKubeOnce(t, bin, etcd, users)
		if err == nil {
			return k
		}
		k.proc.kill()
		if k.proc.portConflict() && attempt < 3 {
			t.Logf("testcluster: kube-apiserver lost a port race (%v); retrying with a new port", err)
			continue
		}
		logProcs(t, []*proc{k.proc})
		t.Fatalf("testcluster: kube-apiserver did not start: %v", err)
	}
}

func startKubeOnce(t testing.TB, bin string, etcd *Etcd, users []KubeUser) (*Kube, error) {
	t.Helper()
	dir := t.TempDir()
	k := &Kube{t: t, etcd: etcd, dir: dir, tokens: map[string]string{}}
	k.proc = &proc{name: "kube-apiserver", bin: bin, logPath: filepath.Join(dir, "kube-apiserver.log")}
	ports, err := freePorts(1, false)
	if err != nil {
		return k, err
	}
	k.port = ports[0]

	// Static tokens: "token,user,uid,\"group1,group2\"" per line.
	var csv strings.Builder
	for _, u := range append([]KubeUser{{Name: KubeAdmin, Groups: []string{"system:masters"}}}, users...) {
		tok := randomHex(16)
		k.tokens[u.Name] = tok
		fmt.Fprintf(&csv, "%s,%s,%s,\"%s\"\n", tok, u.Name, u.Name, strings.Join(u.Groups, ","))
	}
	tokenFile := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(csv.String()), 0o600); err != nil {
		return k, err
	}
	k.ca = testsupport.NewCA(t, dir, "client-ca")
	saKey := filepath.Join(dir, "sa.key")
	if err := writeECKey(saKey); err != nil {
		return k, err
	}
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return k, err
	}
	k.proc.args = []string{
		"--etcd-servers", strings.Join(etcd.Endpoints(), ","),
		"--etcd-prefix", "/registry-" + randomHex(4), // several servers may share one etcd
		"--cert-dir", filepath.Join(dir, "certs"),
		"--secure-port", strconv.Itoa(k.port),
		"--bind-address", "127.0.0.1",
		"--advertise-address", "127.0.0.1",
		"--endpoint-reconciler-type", "none",
		"--service-cluster-ip-range", "10.0.0.0/24",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", saKey,
		"--service-account-signing-key-file", saKey,
		"--token-auth-file", tokenFile,
		"--client-ca-file", k.ca.Path,
		"--authorization-mode", "RBAC",
		"--enable-priority-and-fairness=false",
		"--audit-policy-file", policy,
		"--audit-log-path", k.auditLog(),
		"--audit-log-mode", "blocking", // written before the response: a count read after a request includes it
		"--audit-log-maxsize", "0", // no rotation: LeaseRequests reads one file
		"--v", "1",
	}
	t.Cleanup(func() {
		if t.Failed() {
			logProcs(t, []*proc{k.proc})
		}
		killAll([]*proc{k.proc})
	})
	if err := k.proc.start(); err != nil {
		return k, err
	}
	return k, k.waitReady()
}

// writeECKey writes a new P-256 private key in PEM form, which serves as
// both the signing key and the verification key of service-account tokens.
func writeECKey(path string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

// auditPolicy records every request on a Lease, once, with its name and
// verb, and nothing else (LeaseRequests).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  resources:
  - group: coordination.k8s.io
    resources: ["leases"]
- level: None
`

func (k *Kube) auditLog() string { return filepath.Join(k.dir, "audit.log") }

// LeaseRequests counts the requests the server has served so far on the
// Lease name in namespace: every finished request, and each watch once, when
// its response started (a watch finishes only when it is closed).
func (k *Kube) LeaseRequests(namespace, name string) (int, error) {
	f, err := os.Open(k.auditLog())
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line, []byte(`"name":"`+name+`"`)) {
			continue // cheap test first; the decode below decides
		}
		var ev struct {
			Stage     string `json:"stage"`
			Verb      string `json:"verb"`
			ObjectRef struct {
				Resource  string `json:"resource"`
				Namespace string `json:"namespace"`
				Name      string `json:"name"`
			} `json:"objectRef"`
		}
		if json.Unmarshal(line, &ev) != nil || ev.ObjectRef.Resource != "leases" ||
			ev.ObjectRef.Namespace != namespace || ev.ObjectRef.Name != name {
			continue
		}
		if ev.Verb == "watch" && ev.Stage == "ResponseStarted" || ev.Verb != "watch" && ev.Stage == "ResponseComplete" {
			n++
		}
	}
	return n, sc.Err()
}

// URL is the server's address, https://127.0.0.1:PORT.
func (k *Kube) URL() string { return fmt.Sprintf("https://127.0.0.1:%d", k.port) }

// CAFile is the PEM file that verifies the server's certificate (the
// server writes its self-signed certificate there at start).
func (k *Kube) CAFile() string { return filepath.Join(k.dir, "certs", "apiserver.crt") }

// Token returns the bearer token of user (KubeAdmin or one passed to
// StartKube).
func (k *Kube) Token(user string) string {
	k.t.Helper()
	tok, ok := k.tokens[user]
	if !ok {
		k.t.Fatalf("testcluster: kube-apiserver has no user %q", user)
	}
	return tok
}

// ClientCert writes a client certificate and key for user, in groups,
// which the server accepts (it trusts their CA), and returns their paths.
func (k *Kube) ClientCert(t testing.TB, user string, groups ...string) (certFile, keyFile string) {
	t.Helper()
	return k.ca.WriteCert(t, t.TempDir(), user, groups...)
}

// Kubeconfig writes a kubeconfig file for the given bearer token and
// returns its path. namespace, when not empty, becomes the context's
// namespace.
func (k *Kube) Kubeconfig(t testing.TB, token, namespace string) string {
	t.Helper()
	return k.KubeconfigAt(t, strings.TrimPrefix(k.URL(), "https://"), token, namespace)
}

// KubeconfigAt is Kubeconfig for a client that reaches the server through
// addr (host:port on 127.0.0.1, e.g. a proxy in front of it).
func (k *Kube) KubeconfigAt(t testing.TB, addr, token, namespace string) string {
	t.Helper()
	ns := ""
	if namespace != "" {
		ns = "\n    namespace: " + namespace
	}
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: test
  user:
    token: %s
contexts:
- name: test
  context:
    cluster: test
    user: test%s
current-context: test
`, "https://"+addr, k.CAFile(), token, ns)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	return path
}

// Do sends one request as KubeAdmin to path (e.g. "/api/v1/namespaces")
// with a JSON body (nil for none) and returns the status code and body.
func (k *Kube) Do(t testing.TB, method, path string, body []byte) (int, []byte) {
	t.Helper()
	code, out, err := k.do(method, path, k.tokens[KubeAdmin], body)
	if err != nil {
		t.Fatalf("testcluster: kube-apiserver %s %s: %v", method, path, err)
	}
	return code, out
}

// DoAs is Do with another bearer token.
func (k *Kube) DoAs(t testing.TB, token, method, path string, body []byte) (int, []byte) {
	t.Helper()
	code, out, err := k.do(method, path, token, body)
	if err != nil {
		t.Fatalf("testcluster: kube-apiserver %s %s: %v", method, path, err)
	}
	return code, out
}

func (k *Kube) do(method, path, token string, body []byte) (int, []byte, error) {
	if k.client == nil {
		k.client = k.httpClient()
	}
	req, err := http.NewRequest(method, k.URL()+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// httpClient trusts the server's CA file once it exists.
func (k *Kube) httpClient() *http.Client {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if pemBytes, err := os.ReadFile(k.CAFile()); err == nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pemBytes)
		tc.RootCAs = pool
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, TLSClientConfig: tc, DisableKeepAlives: true}}
}

// waitReady polls /readyz until it answers ok.
func (k *Kube) waitReady() error {
	k.client = nil
	return poll(2*startTimeout, func() error {
		if err := exited([]*proc{k.proc}); err != nil {
			return err
		}
		if _, err := os.Stat(k.CAFile()); err != nil {
			return err
		}
		code, body, err := k.do("GET", "/readyz", k.tokens[KubeAdmin], nil)
		if err != nil {
			k.client = nil // the certificate may have been written since
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("/readyz: %d %s", code, strings.TrimSpace(string(body)))
		}
		return nil
	})
}

// WaitReady waits until the server answers /readyz, failing t otherwise.
func (k *Kube) WaitReady(t testing.TB) {
	t.Helper()
	if err := k.waitReady(); err != nil {
		t.Fatalf("testcluster: kube-apiserver not ready: %v", err)
	}
}

// Stop sends SIGTERM to the server and waits for it to exit.
func (k *Kube) Stop() {
	k.t.Helper()
	if err := k.proc.signal(syscall.SIGTERM, stopTimeout); err != nil {
		k.t.Fatalf("testcluster: %v", err)
	}
}

// Kill SIGKILLs the server, as a crash would.
func (k *Kube) Kill() { k.proc.kill() }

// Freeze stops the server (SIGSTOP) for d, as an overloaded or paused one
// would stall: connections stay open and requests wait, then go on.
func (k *Kube) Freeze(d time.Duration) {
	k.t.Helper()
	if err := k.proc.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		k.t.Fatalf("testcluster: freeze kube-apiserver: %v", err)
	}
	time.Sleep(d)
	if err := k.proc.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		k.t.Fatalf("testcluster: thaw kube-apiserver: %v", err)
	}
}

// Restart starts a stopped or killed server again on the same port, with
// the same tokens and keys, and waits until it is ready.
func (k *Kube) Restart() {
	k.t.Helper()
	if k.proc.running() {
		k.t.Fatal("testcluster: Restart: kube-apiserver is still running")
	}
	if err := k.proc.start(); err != nil {
		k.t.Fatalf("testcluster: %v", err)
	}
	if err := k.waitReady(); err != nil {
		k.t.Fatalf("testcluster: restarted kube-apiserver: %v", err)
	}
}
