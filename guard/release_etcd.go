//go:build linux

package guard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/leaderrun/leaderrun/internal/secretfile"
	"github.com/leaderrun/leaderrun/locker/etcd/etcdwire"
)

func init() { releasers["etcd"] = releaseEtcd }

// releaseEtcd revokes the lease (which deletes our election key) on the
// first endpoint that answers. A lease etcd no longer knows is released.
func releaseEtcd(ctx context.Context, hello BackendHello, handle string) error {
	id, _, err := etcdwire.ParseHandle(handle)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	var h etcdwire.Hello
	if err := settingsOf(hello, &h); err != nil {
		return err
	}
	cli, err := newDialer(h.CACert, h.Cert, h.Key, "")
	tlsOn := cli != nil && cli.tls != nil
	if err != nil {
		return fmt.Errorf("etcd: tls: %w", err)
	}
	if len(h.Endpoints) == 0 {
		return errors.New("etcd: no endpoints")
	}
	if err := etcdPassword(&h); err != nil {
		return err
	}
	var errs []error
	for _, ep := range h.Endpoints {
		base := endpointURL(ep, tlsOn)
		err := revokeAt(ctx, cli, base, h, id)
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", base, err))
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("etcd: revoke lease %x: %w", id, errors.Join(errs...))
}

func revokeAt(ctx context.Context, cli *dialer, base string, h etcdwire.Hello, id int64) error {
	token := ""
	if h.User != "" {
		var out struct {
			Token string `json:"token"`
		}
		if err := postJSON(ctx, cli, base+"/v3/auth/authenticate", "",
			map[string]string{"name": h.User, "password": h.Password}, &out); err != nil {
			return fmt.Errorf("authenticate as %s: %w", h.User, err)
		}
		token = out.Token
	}
	err := postJSON(ctx, cli, base+"/v3/lease/revoke", token,
		map[string]string{"ID": strconv.FormatInt(id, 10)}, nil)
	if err != nil && strings.Contains(err.Error(), "lease not found") {
		return nil
	}
	return err
}

// etcdPassword fills in the password of a hello that names the file
// holding it (read now, as leaderrun read it at its start), and splits a
// user given as USER:PASSWORD without one, so that no message carries a
// password as a user name.
func etcdPassword(h *etcdwire.Hello) error {
	if h.Password != "" || h.User == "" {
		return nil
	}
	if h.PasswordFile != "" {
		pw, err := secretfile.Read(h.PasswordFile)
		if err != nil {
			return fmt.Errorf("etcd: password file %s: %w", h.PasswordFile, err)
		}
		h.Password = pw
		return nil
	}
	if u, p, ok := strings.Cut(h.User, ":"); ok {
		h.User, h.Password = u, p
	}
	return nil
}
