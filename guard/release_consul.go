//go:build linux

package guard

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/leaderrun/leaderrun/locker/consul/acltoken"
	"github.com/leaderrun/leaderrun/locker/consul/consulwire"
)

func init() { releasers["consul"] = releaseConsul }

// releaseConsul frees the key held by the session (at once, without a
// lock-delay, leaving the release marker on it), then destroys the session, on the first address that
// answers, like leaderrun's own release: only the destroy must succeed.
func releaseConsul(ctx context.Context, hello BackendHello, handle string) error {
	session, key, err := consulwire.ParseHandle(handle)
	if err != nil {
		return fmt.Errorf("consul: %w", err)
	}
	var h consulwire.Hello
	if err := settingsOf(hello, &h); err != nil {
		return err
	}
	list := h.Address
	if list == "" {
		list = os.Getenv("CONSUL_HTTP_ADDR")
	}
	if list == "" {
		list = consulwire.DefaultAddress
	}
	if strings.Contains(list, "unix://") {
		return ErrNoDirectRelease
	}
	token, err := consulToken(h)
	if err != nil {
		return err
	}
	header := ""
	if token != "" {
		header = "X-Consul-Token: " + token
	}
	cli, err := newDialer(h.CACert, h.ClientCert, h.ClientKey, h.TLSServerName)
	if err != nil {
		return fmt.Errorf("consul: tls: %w", err)
	}
	// consul/api's own switches: CONSUL_HTTP_SSL makes a bare address
	// https, CONSUL_HTTP_SSL_VERIFY=false skips the server's certificate.
	tlsOn := cli.tls != nil || envBool("CONSUL_HTTP_SSL", false)
	if !envBool("CONSUL_HTTP_SSL_VERIFY", true) {
		if cli.tls == nil {
			cli.tls = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		cli.tls.InsecureSkipVerify = true
	}
	dc := ""
	if h.Datacenter != "" {
		dc = "dc=" + url.QueryEscape(h.Datacenter)
	}
	var errs []error
	for _, a := range strings.Split(list, ",") {
		base := endpointURL(a, tlsOn)
		// The KV release leaves the marker that tells a standby this was
		// the holder's own release (consulwire.Released). It may fail (the
		// key moved on); the destroy decides. A key changed by hand gets
		// the marker too (markConsul).
		marker := consulwire.Released(session)
		kv := base + "/v1/kv/" + escapePath(key)
		rcode, rbody, rerr := cli.do(ctx, "PUT", kv+"?release="+url.QueryEscape(session)+amp(dc), header, marker)
		if rerr == nil && rcode == 200 && strings.TrimSpace(string(rbody)) == "false" {
			markConsul(ctx, cli, kv, dc, header, marker)
		}
		code, body, err := cli.do(ctx, "PUT", base+"/v1/session/destroy/"+url.PathEscape(session)+query(dc), header, nil)
		if err == nil && code == 200 {
			return nil
		}
		if err == nil {
			msg := strings.TrimSpace(string(body))
			if len(msg) > 200 {
				msg = msg[:200]
			}
			if token != "" {
				msg = strings.ReplaceAll(msg, token, "<token>")
			}
			err = fmt.Errorf("HTTP %d: %s", code, msg)
		}
		errs = append(errs, fmt.Errorf("%s: %w", base, err))
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("consul: destroy session %s: %w", session, errors.Join(errs...))
}

// markConsul writes the release marker on a key the session no longer
// holds because it was changed by hand, as leaderrun's own release does:
// a deleted key if it is still absent (cas=0), a free one that no release
// marked if nobody wrote it since it was read (consulwire.Marks), so that
// a standby waiting the holder out as a silent one takes it now.
func markConsul(ctx context.Context, cli *dialer, kv, dc, header string, marker []byte) {
	code, body, err := cli.do(ctx, "GET", kv+"?consistent"+amp(dc), header, nil)
	cas := ""
	switch {
	case err != nil:
		return
	case code == 404:
		cas = "0"
	case code == 200:
		var pairs []struct {
			Session     string
			Value       []byte
			ModifyIndex uint64
		}
		if json.Unmarshal(body, &pairs) != nil || len(pairs) != 1 || !consulwire.Marks(pairs[0].Session, pairs[0].Value) {
			return
		}
		cas = strconv.FormatUint(pairs[0].ModifyIndex, 10)
	default:
		return
	}
	_, _, _ = cli.do(ctx, "PUT", kv+"?cas="+cas+amp(dc), header, marker)
}

// envBool reads a boolean environment variable as strconv.ParseBool does;
// unset or unreadable gives def.
func envBool(name string, def bool) bool {
	v, err := strconv.ParseBool(os.Getenv(name))
	if err != nil {
		return def
	}
	return v
}

// consulToken follows Consul's precedence (acltoken.Read).
func consulToken(h consulwire.Hello) (string, error) {
	t, _, err := acltoken.Read(h.TokenFile, h.Token)
	if err != nil {
		return "", fmt.Errorf("consul: token file: %w", err)
	}
	return t, nil
}
