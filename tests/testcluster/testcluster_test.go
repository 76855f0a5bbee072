package testcluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// etcdctl runs the etcdctl binary against endpoints and returns its trimmed
// standard output, failing t on a non-zero exit.
func etcdctl(t *testing.T, endpoints []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args = append([]string{"--endpoints", strings.Join(endpoints, ","), "--dial-timeout", "5s", "--command-timeout", "10s"}, args...)
	cmd := exec.CommandContext(ctx, Bin(t, "etcdctl"), args...)
	cmd.Env = serverEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("etcdctl %v: %v\n%s", args, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

func TestEtcdSingleMember(t *testing.T) {
	e := StartEtcd(t, 1)
	if got := e.Endpoints(); len(got) != 1 || got[0] != e.Member(0) || !strings.HasPrefix(got[0], "http://127.0.0.1:") {
		t.Fatalf("Endpoints() = %v, Member(0) = %q", got, e.Member(0))
	}
	etcdctl(t, e.Endpoints(), "put", "greeting", "hello")
	if got := etcdctl(t, e.Endpoints(), "get", "greeting", "--print-value-only"); got != "hello" {
		t.Fatalf("get greeting = %q, want hello", got)
	}

	// The data survives a crash and a restart on the same data directory.
	e.Kill(0)
	e.Restart(0)
	e.WaitHealthy(t)
	if got := etcdctl(t, e.Endpoints(), "get", "greeting", "--print-value-only"); got != "hello" {
		t.Fatalf("after restart: get greeting = %q, want hello", got)
	}

	// A lease asked for with a TTL below the minimum is raised to it.
	out := etcdctl(t, e.Endpoints(), "lease", "grant", "0")
	if want := "granted with TTL(1s)"; !strings.Contains(out, want) {
		t.Fatalf("lease grant 0: %q, want it to contain %q (EtcdMinLeaseTTL = %v)", out, want, EtcdMinLeaseTTL)
	}
}

func TestEtcdThreeMembers(t *testing.T) {
	e := StartEtcd(t, 3)
	etcdctl(t, []string{e.Member(0)}, "put", "k", "v1")
	if got := etcdctl(t, []string{e.Member(2)}, "get", "k", "--print-value-only"); got != "v1" {
		t.Fatalf("get k from member 2 = %q, want v1", got)
	}

	// Two of three keep the quorum while one member is down. The killed
	// member may have been the leader, so wait out the election.
	e.Kill(1)
	e.WaitHealthy(t)
	etcdctl(t, []string{e.Member(0)}, "put", "k", "v2")
	e.Restart(1)
	e.WaitHealthy(t)
	if got := etcdctl(t, []string{e.Member(1)}, "get", "k", "--print-value-only"); got != "v2" {
		t.Fatalf("get k from restarted member 1 = %q, want v2", got)
	}

	// A graceful stop and restart works the same way.
	e.Stop(2)
	e.WaitHealthy(t)
	etcdctl(t, []string{e.Member(0), e.Member(1)}, "put", "k", "v3")
	e.Restart(2)
	if got := etcdctl(t, []string{e.Member(2)}, "get", "k", "--print-value-only"); got != "v3" {
		t.Fatalf("get k from restarted member 2 = %q, want v3", got)
	}
}

// consulDo sends one request to a Consul HTTP address and returns status
// and body.
func consulDo(t *testing.T, method, addr, path, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("X-Consul-Token", token)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// kvPut writes a key and fails t unless Consul accepted it.
func kvPut(t *testing.T, addr, token, key, value string) {
	t.Helper()
	if status, body := consulDo(t, http.MethodPut, addr, "/v1/kv/"+key, token, value); status != http.StatusOK || body != "true" {
		t.Fatalf("PUT %s on %s: %d %s", key, addr, status, body)
	}
}

// kvGet reads a key consistently and fails t unless it exists.
func kvGet(t *testing.T, addr, token, key string) string {
	t.Helper()
	status, body := consulDo(t, http.MethodGet, addr, "/v1/kv/"+key+"?raw&consistent", token, "")
	if status != http.StatusOK {
		t.Fatalf("GET %s on %s: %d %s", key, addr, status, body)
	}
	return body
}

func TestConsulSingleServer(t *testing.T) {
	c := StartConsul(t, ConsulOptions{SessionTTLMin: "1s"})
	if len(c.Addrs()) != 1 || c.Addrs()[0] != c.HTTPAddr(0) || c.ManagementToken() != "" {
		t.Fatalf("Addrs() = %v, HTTPAddr(0) = %q, ManagementToken() = %q", c.Addrs(), c.HTTPAddr(0), c.ManagementToken())
	}
	kvPut(t, c.HTTPAddr(0), "", "greeting", "hello")
	if got := kvGet(t, c.HTTPAddr(0), "", "greeting"); got != "hello" {
		t.Fatalf("greeting = %q, want hello", got)
	}

	// The lowered session_ttl_min lets a 1s session through (Consul's
	// default minimum is 10s).
	if status, body := consulDo(t, http.MethodPut, c.HTTPAddr(0), "/v1/session/create", "", `{"TTL":"1s"}`); status != http.StatusOK {
		t.Fatalf("create session with TTL 1s: %d %s", status, body)
	}

	c.Kill(0)
	c.Restart(0)
	c.WaitLeader(t)
	if got := kvGet(t, c.HTTPAddr(0), "", "greeting"); got != "hello" {
		t.Fatalf("after restart: greeting = %q, want hello", got)
	}
}

func TestConsulThreeServers(t *testing.T) {
	c := StartConsul(t, ConsulOptions{Servers: 3})
	kvPut(t, c.HTTPAddr(0), "", "k", "v1")
	if got := kvGet(t, c.HTTPAddr(2), "", "k"); got != "v1" {
		t.Fatalf("k on server 2 = %q, want v1", got)
	}

	// Without session_ttl_min the default 10s minimum holds.
	if status, _ := consulDo(t, http.MethodPut, c.HTTPAddr(0), "/v1/session/create", "", `{"TTL":"1s"}`); status == http.StatusOK {
		t.Fatalf("a 1s session was accepted although session_ttl_min was not lowered")
	}

	// Two of three keep the quorum while one server is down.
	c.Kill(0)
	c.WaitLeader(t)
	kvPut(t, c.HTTPAddr(1), "", "k", "v2")
	c.Restart(0)
	c.WaitLeader(t)
	if got := kvGet(t, c.HTTPAddr(0), "", "k"); got != "v2" {
		t.Fatalf("k on restarted server 0 = %q, want v2", got)
	}

	c.Stop(2)
	c.WaitLeader(t)
	kvPut(t, c.HTTPAddr(1), "", "k", "v3")
	c.Restart(2)
	if got := kvGet(t, c.HTTPAddr(2), "", "k"); got != "v3" {
		t.Fatalf("k on restarted server 2 = %q, want v3", got)
	}
}

func TestConsulACL(t *testing.T) {
	c := StartConsul(t, ConsulOptions{ACL: true})
	addr := c.HTTPAddr(0)
	mgmt := c.ManagementToken()
	if len(mgmt) != 36 {
		t.Fatalf("ManagementToken() = %q, want a UUID", mgmt)
	}

	// default_policy "deny": no token, no write.
	if status, body := consulDo(t, http.MethodPut, addr, "/v1/kv/app/x", "", "1"); status != http.StatusForbidden {
		t.Fatalf("anonymous PUT: %d %s, want 403", status, body)
	}
	kvPut(t, addr, mgmt, "other/x", "1")

	token := c.CreateToken(t, `key_prefix "app/" { policy = "write" }`)
	kvPut(t, addr, token, "app/x", "2")
	if got := kvGet(t, addr, token, "app/x"); got != "2" {
		t.Fatalf("app/x = %q, want 2", got)
	}
	if status, body := consulDo(t, http.MethodPut, addr, "/v1/kv/other/x", token, "3"); status != http.StatusForbidden {
		t.Fatalf("PUT outside the token's prefix: %d %s, want 403", status, body)
	}
	if got := kvGet(t, addr, mgmt, "other/x"); got != "1" {
		t.Fatalf("other/x = %q, want 1 (the denied write must not land)", got)
	}
}

// fakeTB records how Bin gave up. Skipf and Fatalf end the calling
// goroutine, as the real ones do.
type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// runBin calls Bin with a fake TB on its own goroutine, so that Skipf and
// Fatalf end only that goroutine.
func runBin(tb *fakeTB, name string) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		Bin(tb, name)
	}()
	<-done
}

func TestBinMissing(t *testing.T) {
	t.Setenv(BinEnv, t.TempDir())

	t.Setenv("CI", "")
	skip := &fakeTB{TB: t}
	runBin(skip, "etcd")
	if !skip.skipped || !strings.Contains(skip.msg, "make servers") {
		t.Fatalf("outside CI: skipped=%v failed=%v msg=%q, want a skip naming `make servers`", skip.skipped, skip.failed, skip.msg)
	}

	t.Setenv("CI", "true")
	fail := &fakeTB{TB: t}
	runBin(fail, "etcd")
	if !fail.failed || !strings.Contains(fail.msg, "make servers") {
		t.Fatalf("under CI=true: skipped=%v failed=%v msg=%q, want a failure naming `make servers`", fail.skipped, fail.failed, fail.msg)
	}
}

func TestRepoRoot(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ok, err := declaresModule(root + "/go.mod")
	if err != nil || !ok {
		t.Fatalf("repoRoot() = %q, which does not declare %s (err %v)", root, modulePath, err)
	}
}
