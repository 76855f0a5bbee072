//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leaderrun/leaderrun/guard"
	"github.com/leaderrun/leaderrun/internal/testcluster"
	"github.com/leaderrun/leaderrun/internal/testsupport"
	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/lockertest"
	"github.com/leaderrun/leaderrun/locker/zookeeper"
)

// The guard reads leaderrun's hello with its own struct; a renamed field
// on either side fails here.
func TestGuardReadsBackendSpec(t *testing.T) {
	spec := backendSpec{
		Backend:       "etcd",
		EtcdEndpoints: []string{"https://127.0.0.1:1", "127.0.0.2:2"},
		EtcdUser:      "u",
		EtcdPassword:  "p",
		EtcdCACert:    "/ca.pem",
		EtcdCert:      "/cert.pem",
		EtcdKey:       "/key.pem",

		ConsulAddr:          "127.0.0.1:8500,https://127.0.0.2:8501",
		ConsulToken:         "t",
		ConsulTokenFile:     "/token",
		ConsulCACert:        "/consul-ca.pem",
		ConsulClientCert:    "/consul-cert.pem",
		ConsulClientKey:     "/consul-key.pem",
		ConsulTLSServerName: "consul.example",
		ConsulDatacenter:    "dc2",

		ZKServers: []string{"127.0.0.1:2181", "127.0.0.2:2181/chroot"},
		Options:   locker.Options{TTL: 7 * time.Second},
	}
	got, err := guard.ParseBackendHello(spec.encode())
	if err != nil {
		t.Fatal(err)
	}
	want := guard.BackendHello{
		Backend:       spec.Backend,
		EtcdEndpoints: spec.EtcdEndpoints,
		EtcdUser:      spec.EtcdUser,
		EtcdPassword:  spec.EtcdPassword,
		EtcdCACert:    spec.EtcdCACert,
		EtcdCert:      spec.EtcdCert,
		EtcdKey:       spec.EtcdKey,

		ConsulAddr:          spec.ConsulAddr,
		ConsulToken:         spec.ConsulToken,
		ConsulTokenFile:     spec.ConsulTokenFile,
		ConsulCACert:        spec.ConsulCACert,
		ConsulClientCert:    spec.ConsulClientCert,
		ConsulClientKey:     spec.ConsulClientKey,
		ConsulTLSServerName: spec.ConsulTLSServerName,
		ConsulDatacenter:    spec.ConsulDatacenter,

		ZKServers: spec.ZKServers,
	}
	want.Options.TTL = spec.Options.TTL
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("guard read %+v, want %+v", got, want)
	}
}

// guardEtcdRelease holds key under a lease, has the guard release it
// directly and checks the key is gone and the lease revoked; a second
// release of the same handle succeeds too.
func guardEtcdRelease(t *testing.T, admin *clientv3.Client, spec backendSpec) {
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
	spec.EtcdEndpoints = append([]string{"http://127.0.0.1:1"}, spec.EtcdEndpoints...)
	for i := range 2 {
		if err := guard.DirectRelease(ctx, spec.encode(), handle); err != nil {
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
		guardEtcdRelease(t, admin, backendSpec{Backend: "etcd", EtcdEndpoints: c.Endpoints()})
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
		spec := backendSpec{Backend: "etcd", EtcdEndpoints: c.Endpoints(), EtcdUser: "root", EtcdPassword: "wrong"}
		if err := guard.DirectRelease(ctx, spec.encode(), "1:/x/@1"); err == nil {
			t.Error("release with a wrong password succeeded")
		} else if s := err.Error(); strings.Contains(s, "wrong") {
			t.Errorf("error shows the password: %s", s)
		}
		spec.EtcdPassword = "rootpw"
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
	for name, spec := range map[string]backendSpec{
		"token":      {Backend: "consul", ConsulAddr: "127.0.0.1:1," + c.HTTPAddr(0), ConsulToken: c.ManagementToken()},
		"token file": {Backend: "consul", ConsulAddr: c.HTTPAddr(0), ConsulTokenFile: tokenFile},
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
				if err := guard.DirectRelease(ctx, spec.encode(), handle); err != nil {
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
		spec := backendSpec{Backend: "consul", ConsulAddr: c.HTTPAddr(0), ConsulToken: "6d1c6b8e-0000-4000-8000-000000000000"}
		err := guard.DirectRelease(ctx, spec.encode(), "consul:6d1c6b8e-0000-4000-8000-000000000001:k")
		if err == nil {
			t.Fatal("release with an unknown token succeeded")
		}
		if strings.Contains(err.Error(), spec.ConsulToken) {
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
	spec := backendSpec{Backend: "zookeeper", ZKServers: append([]string{"127.0.0.1:1"}, z.Addrs()...),
		Options: locker.Options{TTL: 4 * time.Second}}
	released := time.Now()
	for i := range 2 {
		if err := guard.DirectRelease(lockertest.Ctx(t, 10*time.Second), spec.encode(), leader.Handle()); err != nil {
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
	if err := guard.DirectRelease(lockertest.Ctx(t, 5*time.Second), spec.encode(), "zz:00:/x"); err == nil {
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
		for name, bad := range map[string]backendSpec{
			"another CA":            {EtcdCACert: other.Path, EtcdCert: clientCert, EtcdKey: clientKey},
			"no client certificate": {EtcdCACert: ca.Path},
		} {
			bad.Backend, bad.EtcdEndpoints = "etcd", e.TLSEndpoints()
			if err := guard.DirectRelease(ctx, bad.encode(), handle); err == nil {
				t.Errorf("%s: release succeeded", name)
			}
			if ttl, err := admin.TimeToLive(ctx, l.ID); err != nil || ttl.TTL <= 0 {
				t.Errorf("%s: lease after a refused release: %v, %v; want alive", name, ttl, err)
			}
		}
		guardEtcdRelease(t, admin, backendSpec{Backend: "etcd", EtcdEndpoints: e.TLSEndpoints(),
			EtcdCACert: ca.Path, EtcdCert: clientCert, EtcdKey: clientKey})
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
		for name, bad := range map[string]backendSpec{
			"another CA":            {ConsulCACert: other.Path, ConsulClientCert: clientCert, ConsulClientKey: clientKey},
			"no client certificate": {ConsulCACert: ca.Path},
		} {
			bad.Backend, bad.ConsulAddr = "consul", c.HTTPSAddr(0)
			if err := guard.DirectRelease(ctx, bad.encode(), handle); err == nil {
				t.Errorf("%s: release succeeded", name)
			}
			if s, _, err := admin.Session().Info(session, nil); err != nil || s == nil {
				t.Errorf("%s: session after a refused release: %+v, %v; want alive", name, s, err)
			}
		}
		spec := backendSpec{Backend: "consul", ConsulAddr: c.HTTPSAddr(0),
			ConsulCACert: ca.Path, ConsulClientCert: clientCert, ConsulClientKey: clientKey}
		if err := guard.DirectRelease(ctx, spec.encode(), handle); err != nil {
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
