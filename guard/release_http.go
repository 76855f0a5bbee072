package guard

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// BackendHello is the part of leaderrun's hello (its backend spec) that a
// direct release reads. Its JSON names are leaderrun's; a test in package
// main keeps the two in step.
type BackendHello struct {
	Backend       string   `json:"backend"`
	EtcdEndpoints []string `json:"etcd_endpoints"`
	EtcdUser      string   `json:"etcd_user"`
	EtcdPassword  string   `json:"etcd_password"`
	EtcdCACert    string   `json:"etcd_cacert"`
	EtcdCert      string   `json:"etcd_cert"`
	EtcdKey       string   `json:"etcd_key"`
}

// ParseBackendHello reads the fields of a hello that a direct release needs.
func ParseBackendHello(hello []byte) (BackendHello, error) {
	var h BackendHello
	if err := json.Unmarshal(hello, &h); err != nil {
		return h, fmt.Errorf("hello: %w", err)
	}
	return h, nil
}

// ErrNoDirectRelease says the backend's lease cannot be released by the
// guard itself; leaderrun must do it.
var ErrNoDirectRelease = errors.New("no direct release for this backend")

// DirectRelease gives up a lease with the standard library alone, without
// starting leaderrun: on etcd it revokes the lease through etcd's JSON
// gateway. Other backends return ErrNoDirectRelease. Errors never carry a
// password or token.
func DirectRelease(ctx context.Context, hello []byte, handle string) error {
	h, err := ParseBackendHello(hello)
	if err != nil {
		return err
	}
	switch h.Backend {
	case "etcd":
		return releaseEtcd(ctx, h, handle)
	default:
		return ErrNoDirectRelease
	}
}

// httpClient is a client that trusts ca (or the system roots) and presents
// cert/key when given.
func httpClient(ca, cert, key, serverName string) (*http.Client, bool, error) {
	if ca == "" && cert == "" && key == "" && serverName == "" {
		return &http.Client{}, false, nil
	}
	cfg := &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, false, err
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, false, fmt.Errorf("%s: no PEM certificate", ca)
		}
	}
	if cert != "" || key != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, false, err
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, Proxy: nil}}, true, nil
}

// etcdHandle splits an etcd lease handle "<lease id hex>:<key>" into the
// lease id.
func etcdHandle(handle string) (int64, error) {
	hex, _, ok := strings.Cut(handle, ":")
	id, err := strconv.ParseInt(hex, 16, 64)
	if !ok || err != nil || id <= 0 {
		return 0, fmt.Errorf("etcd: %q is not a lease handle", handle)
	}
	return id, nil
}

// releaseEtcd revokes the lease (which deletes our election key) on the
// first endpoint that answers. A lease etcd no longer knows is released.
func releaseEtcd(ctx context.Context, h BackendHello, handle string) error {
	id, err := etcdHandle(handle)
	if err != nil {
		return err
	}
	cli, tlsOn, err := httpClient(h.EtcdCACert, h.EtcdCert, h.EtcdKey, "")
	if err != nil {
		return fmt.Errorf("etcd: tls: %w", err)
	}
	if len(h.EtcdEndpoints) == 0 {
		return errors.New("etcd: no endpoints")
	}
	var errs []error
	for _, ep := range h.EtcdEndpoints {
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

// endpointURL gives ep a scheme: https when TLS files are set.
func endpointURL(ep string, tlsOn bool) string {
	ep = strings.TrimSuffix(strings.TrimSpace(ep), "/")
	if strings.HasPrefix(ep, "http://") || strings.HasPrefix(ep, "https://") {
		return ep
	}
	ep = strings.TrimPrefix(ep, "unix://")
	if tlsOn {
		return "https://" + ep
	}
	return "http://" + ep
}

func revokeAt(ctx context.Context, cli *http.Client, base string, h BackendHello, id int64) error {
	token := ""
	if h.EtcdUser != "" {
		var out struct {
			Token string `json:"token"`
		}
		if err := postJSON(ctx, cli, base+"/v3/auth/authenticate", "",
			map[string]string{"name": h.EtcdUser, "password": h.EtcdPassword}, &out); err != nil {
			return fmt.Errorf("authenticate as %s: %w", h.EtcdUser, err)
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

// postJSON posts body as JSON and decodes a 200 answer into out. An error
// quotes only the server's message.
func postJSON(ctx context.Context, cli *http.Client, url, token string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", token)
	}
	resp, err := cli.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Message string `json:"message"`
			Error   string `json:"error"`
		}
		_ = json.Unmarshal(data, &e)
		msg := e.Message
		if msg == "" {
			msg = e.Error
		}
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		return fmt.Errorf("%s: %s", resp.Status, msg)
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}
