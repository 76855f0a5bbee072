//go:build linux

package main

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leaderrun/leaderrun/guard"
	"github.com/leaderrun/leaderrun/internal/testcluster"
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
	}
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
