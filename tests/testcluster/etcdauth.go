//go:build linux

package testcluster

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// EtcdUser is a user EnableAuth adds: its password, and the key prefix
// its role (of the same name) may read and write.
type EtcdUser struct{ Name, Password, Prefix string }

// EnableAuth adds the root user (password rootPassword, role root) and
// users, each with a role that reads and writes its prefix alone, then
// turns authentication on.
func (e *Etcd) EnableAuth(t testing.TB, rootPassword string, users ...EtcdUser) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("testcluster: etcd client: %v", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	steps := []func() error{
		func() error { _, err := cli.RoleAdd(ctx, "root"); return err },
		func() error { _, err := cli.UserAdd(ctx, "root", rootPassword); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
	}
	for _, u := range users {
		steps = append(steps,
			func() error { _, err := cli.RoleAdd(ctx, u.Name); return err },
			func() error {
				_, err := cli.RoleGrantPermission(ctx, u.Name, u.Prefix, clientv3.GetPrefixRangeEnd(u.Prefix), clientv3.PermissionType(clientv3.PermReadWrite))
				return err
			},
			func() error { _, err := cli.UserAdd(ctx, u.Name, u.Password); return err },
			func() error { _, err := cli.UserGrantRole(ctx, u.Name, u.Name); return err },
		)
	}
	steps = append(steps, func() error { _, err := cli.AuthEnable(ctx); return err })
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("testcluster: enable etcd auth: %v", err)
		}
	}
}
