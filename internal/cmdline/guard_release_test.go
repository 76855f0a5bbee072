//go:build linux

package cmdline

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leaderrun/leaderrun/guard"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/consul/consulwire"
	"github.com/leaderrun/leaderrun/locker/etcd/etcdwire"
	"github.com/leaderrun/leaderrun/locker/kubernetes"
	"github.com/leaderrun/leaderrun/locker/kubernetes/kubewire"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/locker/zookeeper"
	"github.com/leaderrun/leaderrun/locker/zookeeper/zkwire"
	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// guardEtcdRelease holds key under a lease, has the guard release it
// directly and checks the key is gone and the lease revoked; a second
// release of the same handle succeeds too.
func guardEtcdRelease(t *testing.T, admin *clientv3.Client, spec etcdwire.Hello) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := admin.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("/guard-release/@%x", int64(l.ID))
	if _, err := admin.Put(ctx, key, "", clientv3.WithLease(l.ID)); err != nil {
		t.Fatal(err)
	}
	handle := fmt.Sprintf("%x:%s", int64(l.ID), key)
	// A dead endpoint first: the next one answers.
	spec.Endpoints = append([]string{"http://127.0.0.1:1"}, spec.Endpoints...)
	for i := range 2 {
		if err := guard.DirectRelease(ctx, helloOf("etcd", spec), handle); err != nil {
			t.Fatalf("release %d: %v", i+1, err)
		}
	}
	r, err := admin.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 0 {
		t.Errorf("key %s still held after the guard's release", key)
	}
	ttl, err := admin.TimeToLive(ctx, l.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL != -1 {
		t.Errorf("lease %x TTL %d after the guard's release, want -1 (gone)", int64(l.ID), ttl.TTL)
	}
}

func TestGuardReleasesEtcdLease(t *testing.T) {
	c := testcluster.StartEtcd(t, 1)
	admin, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	t.Run("no auth", func(t *testing.T) {
		guardEtcdRelease(t, admin, etcdwire.Hello{Endpoints: c.Endpoints()})
	})
	t.Run("user and password", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, step := range []func() error{
			func() error { _, err := admin.UserAdd(ctx, "root", "rootpw"); return err },
			func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
			func() error { _, err := admin.AuthEnable(ctx); return err },
		} {
			if err := step(); err != nil {
				t.Fatal(err)
			}
		}
		root, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second,
			Username: "root", Password: "rootpw"})
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		spec := etcdwire.Hello{Endpoints: c.Endpoints(), User: "root", Password: "wrong"}
		if err := guard.DirectRelease(ctx, helloOf("etcd", spec), "1:/x/@1"); err == nil {
			t.Error("release with a wrong password succeeded")
		} else if s := err.Error(); strings.Contains(s, "wrong") {
			t.Errorf("error shows the password: %s", s)
		}
		spec.Password = "rootpw"
		guardEtcdRelease(t, root, spec)
	})
}

// TestGuardReleasesConsulSession holds a key with a session, has the guard
// release it directly with an ACL token (from the flag, then from a file)
// and checks the key is free and the session gone.
func TestGuardReleasesConsulSession(t *testing.T) {
	c := testcluster.StartConsul(t, testcluster.ConsulOptions{ACL: true})
	cfg := api.DefaultConfig()
	cfg.Address = c.HTTPAddr(0)
	cfg.Token = c.ManagementToken()
	admin, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(c.ManagementToken()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, spec := range map[string]consulwire.Hello{
		"token":      {Address: "127.0.0.1:1," + c.HTTPAddr(0), Token: c.ManagementToken()},
		"token file": {Address: c.HTTPAddr(0), TokenFile: tokenFile},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// A long lock-delay: a key freed by the session's destroy alone
			// could not be taken again for a minute.
			session, _, err := admin.Session().Create(&api.SessionEntry{TTL: "60s", LockDelay: time.Minute, Behavior: api.SessionBehaviorRelease}, nil)
			if err != nil {
				t.Fatal(err)
			}
			key := "guard-release/" + strings.ReplaceAll(name, " ", "-")
			if ok, _, err := admin.KV().Acquire(&api.KVPair{Key: key, Session: session}, nil); err != nil || !ok {
				t.Fatalf("acquire %s: %v %v", key, ok, err)
			}
			handle := "consul:" + session + ":" + key
			for i := range 2 {
				if err := guard.DirectRelease(ctx, helloOf("consul", spec), handle); err != nil {
					t.Fatalf("release %d: %v", i+1, err)
				}
			}
			if s, _, err := admin.Session().Info(session, nil); err != nil || s != nil {
				t.Errorf("session %s after the guard's release: %+v, %v; want gone", session, s, err)
			}
			other, _, err := admin.Session().Create(&api.SessionEntry{TTL: "60s"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if ok, _, err := admin.KV().Acquire(&api.KVPair{Key: key, Session: other}, nil); err != nil || !ok {
				t.Errorf("another session cannot take %s after the guard's release (%v, %v)", key, ok, err)
			}
		})
	}
	t.Run("wrong token", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		spec := consulwire.Hello{Address: c.HTTPAddr(0), Token: "6d1c6b8e-0000-4000-8000-000000000000"}
		err := guard.DirectRelease(ctx, helloOf("consul", spec), "consul:6d1c6b8e-0000-4000-8000-000000000001:k")
		if err == nil {
			t.Fatal("release with an unknown token succeeded")
		}
		if strings.Contains(err.Error(), spec.Token) {
			t.Errorf("error shows the token: %v", err)
		}
	})
}

// TestGuardClosesZooKeeperSession has the guard end a leader's session by
// its handle: the waiting candidate takes over at once with a higher epoch,
// the old lease is lost, and a second release of the same handle succeeds.
func TestGuardClosesZooKeeperSession(t *testing.T) {
	z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1})
	newLocker := func() *zookeeper.Locker {
		l, err := zookeeper.New(zookeeper.Config{Servers: z.Addrs(), Options: locker.Options{Key: "guard-release", TTL: 4 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	leader := lockertest.MustAcquire(t, newLocker())
	ch := lockertest.AcquireAsync(t, lockertest.Ctx(t, 30*time.Second), newLocker())
	// A dead server first: the next one answers.
	spec := zkwire.Hello{Servers: append([]string{"127.0.0.1:1"}, z.Addrs()...), SessionTimeout: 4 * time.Second}
	released := time.Now()
	for i := range 2 {
		if err := guard.DirectRelease(lockertest.Ctx(t, 10*time.Second), helloOf("zookeeper", spec), leader.Handle()); err != nil {
			t.Fatalf("release %d: %v", i+1, err)
		}
	}
	r := <-ch
	if r.Err != nil {
		t.Fatalf("standby after the guard's release: %v", r.Err)
	}
	defer r.Lease.Release(lockertest.Ctx(t, 5*time.Second))
	// Well before the session's 4s timeout: the release ended it.
	if took := time.Since(released); took > 2*time.Second {
		t.Errorf("standby took over %v after the release; the session was not closed", took)
	}
	if r.Lease.Epoch() <= leader.Epoch() {
		t.Errorf("epoch %d after the guard's release, want > %d", r.Lease.Epoch(), leader.Epoch())
	}
	testsupport.WaitFor(t, 10*time.Second, "old lease lost", func() bool { return testsupport.IsClosed(leader.Lost()) })
	if err := guard.DirectRelease(lockertest.Ctx(t, 5*time.Second), helloOf("zookeeper", spec), "zz:00:/x"); err == nil {
		t.Error("a malformed handle was accepted")
	}
}

// TestGuardReleasesOverTLS has the guard release an etcd lease and a Consul
// session over TLS, against servers that require a client certificate
// signed by their CA; a guard that trusts another CA, or has no client
// certificate, is refused and leaves the lease alone.
func TestGuardReleasesOverTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testsupport.NewCA(t, dir, "ca")
	other := testsupport.NewCA(t, dir, "other")
	serverCert, serverKey := ca.WriteCert(t, dir, "server")
	clientCert, clientKey := ca.WriteCert(t, dir, "client")
	files := testcluster.TLSFiles{Cert: serverCert, Key: serverKey, CA: ca.Path}

	t.Run("etcd", func(t *testing.T) {
		t.Parallel()
		e := testcluster.StartEtcdTLS(t, files)
		admin, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		l, err := admin.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		handle := fmt.Sprintf("%x:/guard-release/@%x", int64(l.ID), int64(l.ID))
		for name, bad := range map[string]etcdwire.Hello{
			"another CA":            {CACert: other.Path, Cert: clientCert, Key: clientKey},
			"no client certificate": {CACert: ca.Path},
		} {
			bad.Endpoints = e.TLSEndpoints()
			if err := guard.DirectRelease(ctx, helloOf("etcd", bad), handle); err == nil {
				t.Errorf("%s: release succeeded", name)
			}
			if ttl, err := admin.TimeToLive(ctx, l.ID); err != nil || ttl.TTL <= 0 {
				t.Errorf("%s: lease after a refused release: %v, %v; want alive", name, ttl, err)
			}
		}
		guardEtcdRelease(t, admin, etcdwire.Hello{Endpoints: e.TLSEndpoints(),
			CACert: ca.Path, Cert: clientCert, Key: clientKey})
	})

	t.Run("consul", func(t *testing.T) {
		t.Parallel()
		c := testcluster.StartConsul(t, testcluster.ConsulOptions{TLS: &files})
		cfg := api.DefaultConfig()
		cfg.Address = c.HTTPAddr(0)
		admin, err := api.NewClient(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		session, _, err := admin.Session().Create(&api.SessionEntry{TTL: "60s", Behavior: api.SessionBehaviorRelease}, nil)
		if err != nil {
			t.Fatal(err)
		}
		key := "guard-release/tls"
		if ok, _, err := admin.KV().Acquire(&api.KVPair{Key: key, Session: session}, nil); err != nil || !ok {
			t.Fatalf("acquire %s: %v %v", key, ok, err)
		}
		handle := "consul:" + session + ":" + key
		for name, bad := range map[string]consulwire.Hello{
			"another CA":            {CACert: other.Path, ClientCert: clientCert, ClientKey: clientKey},
			"no client certificate": {CACert: ca.Path},
		} {
			bad.Address = c.HTTPSAddr(0)
			if err := guard.DirectRelease(ctx, helloOf("consul", bad), handle); err == nil {
				t.Errorf("%s: release succeeded", name)
			}
			if s, _, err := admin.Session().Info(session, nil); err != nil || s == nil {
				t.Errorf("%s: session after a refused release: %+v, %v; want alive", name, s, err)
			}
		}
		spec := consulwire.Hello{Address: c.HTTPSAddr(0),
			CACert: ca.Path, ClientCert: clientCert, ClientKey: clientKey}
		if err := guard.DirectRelease(ctx, helloOf("consul", spec), handle); err != nil {
			t.Fatalf("release over TLS: %v", err)
		}
		if s, _, err := admin.Session().Info(session, nil); err != nil || s != nil {
			t.Errorf("session %s after the guard's release: %+v, %v; want gone", session, s, err)
		}
		if p, _, err := admin.KV().Get(key, nil); err != nil || p == nil || p.Session != "" {
			t.Errorf("key %s after the guard's release: %+v, %v; want free", key, p, err)
		}
	})
}

// kubeconfigFor writes a kubeconfig for k whose cluster and user entries
// are the given YAML lines (indented under "cluster:" and "user:").
func kubeconfigFor(t *testing.T, cluster, user string) string {
	t.Helper()
	cfg := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n" + cluster +
		"users:\n- name: u\n  user:\n" + user +
		"contexts:\n- name: x\n  context: {cluster: c, user: u, namespace: default}\ncurrent-context: x\n"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// kubeLocker opens a Kubernetes Locker for key with the kubeconfig.
func kubeLocker(t *testing.T, kubeconfig, key, id string) *kubernetes.Locker {
	t.Helper()
	lk, err := kubernetes.New(kubernetes.Config{
		Options:    locker.Options{Key: key, ID: id, TTL: 30 * time.Second, NoWait: true},
		Kubeconfig: kubeconfig,
	})
	if err != nil {
		t.Fatal(err)
	}
	return lk
}

// leaseShape is what a released Lease keeps: its spec fields and its
// annotations (names only, and the epoch's value).
func leaseShape(t *testing.T, k *testcluster.Kube, lk *kubernetes.Locker) string {
	t.Helper()
	code, body := k.Do(t, "GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/"+lk.Name(), nil)
	if code != 200 {
		t.Fatalf("get Lease: %d %s", code, body)
	}
	var l struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Spec map[string]any `json:"spec"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatal(err)
	}
	var names []string
	for f := range l.Spec {
		names = append(names, "spec."+f)
	}
	for a := range l.Metadata.Annotations {
		names = append(names, a)
	}
	slices.Sort(names)
	return strings.Join(names, " ")
}

// TestGuardReleasesKubernetesLease gives the guard the connection
// leaderrun resolved from a kubeconfig (token, token file, client
// certificate, CA inline or in a file), has it release a Lease held by
// leaderrun's own Locker, and checks that another candidate takes it at
// once with a higher epoch, and that the Lease looks exactly as the
// Locker's own release leaves it. A kubeconfig whose user a plain HTTPS
// client cannot be (exec plugin, proxy) keeps the guard leaderrun itself.
func TestGuardReleasesKubernetesLease(t *testing.T) {
	e := testcluster.StartEtcd(t, 1)
	k := testcluster.StartKube(t, e)
	admin := k.Token(testcluster.KubeAdmin)
	ca, err := os.ReadFile(k.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(admin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := k.ClientCert(t, "cert-admin", "system:masters")
	cert, _ := os.ReadFile(certFile)
	key, _ := os.ReadFile(keyFile)
	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
	server := "    server: " + k.URL() + "\n"
	caFile := "    certificate-authority: " + k.CAFile() + "\n"

	for _, tc := range []struct {
		name, cluster, user string
	}{
		{"token", server + caFile, "    token: " + admin + "\n"},
		{"token file", server + caFile, "    tokenFile: " + tokenFile + "\n"},
		{"client certificate files", server + caFile, "    client-certificate: " + certFile + "\n    client-key: " + keyFile + "\n"},
		{"inline CA and client certificate", server + "    certificate-authority-data: " + b64(ca) + "\n    tls-server-name: kubernetes.default.svc\n",
			"    client-certificate-data: " + b64(cert) + "\n    client-key-data: " + b64(key) + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			kc := kubeconfigFor(t, tc.cluster, tc.user)
			key := "guard-" + strings.ReplaceAll(tc.name, " ", "-")
			spec, whyFull := kubeHello(locker.OneAttempt(kubeLocker(t, kc, key, "a"), key, "", 0))
			if whyFull != "" || spec.Conn == nil {
				t.Fatalf("the small guard would not release: %s", whyFull)
			}
			// The guard's release and the Locker's own, on two Leases.
			var shapes []string
			var epochA uint64
			for i, own := range []bool{false, true} {
				lk := kubeLocker(t, kc, key+strconv.Itoa(i), "a")
				lease, err := lk.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := lease.Renew(ctx); err != nil {
					t.Fatal(err)
				}
				if own {
					err = lease.Release(ctx)
				} else {
					epochA = lease.Epoch()
					for n := range 2 { // the second finds nothing to do
						if err = guard.DirectRelease(ctx, helloOf("kubernetes", spec), lease.Handle()); err != nil {
							t.Fatalf("guard's release %d: %v", n+1, err)
						}
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				shapes = append(shapes, leaseShape(t, k, lk))
			}
			if shapes[0] != shapes[1] {
				t.Errorf("Lease after the guard's release:\n  %s\nafter leaderrun's own:\n  %s", shapes[0], shapes[1])
			}
			b, err := kubeLocker(t, kc, key+"0", "b").Acquire(ctx)
			if err != nil {
				t.Fatalf("another candidate cannot take the Lease the guard released: %v", err)
			}
			if b.Epoch() <= epochA {
				t.Errorf("epoch %d after the guard's release, want > %d", b.Epoch(), epochA)
			}
			_ = b.Release(ctx)
		})
	}

	for _, tc := range []struct {
		name, cluster, user string
	}{
		{"exec plugin", server + caFile, "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/false\n      interactiveMode: Never\n"},
		{"proxy", server + caFile + "    proxy-url: http://127.0.0.1:1\n", "    token: " + admin + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, whyFull := kubeHello(kubeLocker(t, kubeconfigFor(t, tc.cluster, tc.user), "guard-full", "a"))
			if whyFull == "" {
				t.Fatalf("the small guard would release with %s", tc.name)
			}
			if spec.Conn != nil {
				t.Errorf("the hello carries a connection the small guard will not use")
			}
		})
	}
}

// helloOf is the guard's hello for a backend with these settings.
func helloOf(backend string, settings any) []byte {
	raw, err := json.Marshal(settings)
	if err != nil {
		panic(err)
	}
	b, err := json.Marshal(guard.BackendHello{Backend: backend, Settings: raw})
	if err != nil {
		panic(err)
	}
	return b
}

// kubeHello is what a run's guard hello carries for lk, and why the small
// guard could not release its Lease ("" when it can).
func kubeHello(lk locker.Locker) (kubewire.Hello, string) {
	h, whyFull := (&kubernetesSettings{}).Guard(lk)
	return h.(kubewire.Hello), whyFull
}
