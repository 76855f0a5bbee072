package guard

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/leaderrun/leaderrun/locker/consul/acltoken"
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

	ConsulAddr          string `json:"consul_addr"`
	ConsulToken         string `json:"consul_token"`
	ConsulTokenFile     string `json:"consul_token_file"`
	ConsulCACert        string `json:"consul_ca_file"`
	ConsulClientCert    string `json:"consul_client_cert"`
	ConsulClientKey     string `json:"consul_client_key"`
	ConsulTLSServerName string `json:"consul_tls_server_name"`
	ConsulDatacenter    string `json:"consul_datacenter"`

	ZKServers []string `json:"zk_servers"`

	Options struct {
		TTL time.Duration
	} `json:"options"`

	K8sServer        string `json:"k8s_server"`
	K8sCAData        string `json:"k8s_ca_data"`
	K8sCAFile        string `json:"k8s_ca_file"`
	K8sCertData      string `json:"k8s_cert_data"`
	K8sKeyData       string `json:"k8s_key_data"`
	K8sCertFile      string `json:"k8s_cert_file"`
	K8sKeyFile       string `json:"k8s_key_file"`
	K8sToken         string `json:"k8s_token"`
	K8sTokenFile     string `json:"k8s_token_file"`
	K8sTLSServerName string `json:"k8s_tls_server_name"`
	K8sInsecure      bool   `json:"k8s_insecure"`
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
// gateway; on Consul it frees the key and destroys the session over the
// HTTP API; on ZooKeeper it closes the session with the client protocol's
// closeSession; on Kubernetes it clears the Lease's holder (when leaderrun
// passed the connection). Other backends return ErrNoDirectRelease. Errors
// never carry a password or token.
func DirectRelease(ctx context.Context, hello []byte, handle string) error {
	h, err := ParseBackendHello(hello)
	if err != nil {
		return err
	}
	switch h.Backend {
	case "etcd":
		return releaseEtcd(ctx, h, handle)
	case "consul":
		return releaseConsul(ctx, h, handle)
	case "zookeeper":
		return releaseZooKeeper(ctx, h, handle)
	case "kubernetes":
		return releaseKubernetes(ctx, h, handle)
	default:
		return ErrNoDirectRelease
	}
}

// dialer opens a connection for a base URL: TLS trusting ca (or the
// system roots) and presenting cert/key when given. The guard speaks just
// enough HTTP/1.1 itself: net/http would more than double its resident
// memory for the whole life of the job.
type dialer struct{ tls *tls.Config }

func newDialer(ca, cert, key, serverName string) (*dialer, error) {
	if ca == "" && cert == "" && key == "" && serverName == "" {
		return &dialer{}, nil
	}
	cfg := &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificate", ca)
		}
	}
	if cert != "" || key != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return &dialer{tls: cfg}, nil
}

// do sends one request with Connection: close and returns the status code
// and body of the answer.
func (d *dialer) do(ctx context.Context, method, url, token string, body []byte) (int, []byte, error) {
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok {
		return 0, nil, fmt.Errorf("%q: no scheme", url)
	}
	host, path, _ := strings.Cut(rest, "/")
	path = "/" + path
	addr := host
	if _, _, err := net.SplitHostPort(host); err != nil {
		addr = net.JoinHostPort(strings.Trim(host, "[]"), map[bool]string{true: "443", false: "80"}[scheme == "https"])
	}
	var nd net.Dialer
	conn, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if scheme == "https" {
		cfg := &tls.Config{}
		if d.tls != nil {
			cfg = d.tls.Clone()
		}
		if cfg.ServerName == "" {
			h, _, err := net.SplitHostPort(addr)
			if err != nil {
				h = addr
			}
			cfg.ServerName = h
		}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return 0, nil, err
		}
		conn = tc
	} else if scheme != "http" {
		return 0, nil, fmt.Errorf("%q: scheme %s", url, scheme)
	}
	var req bytes.Buffer
	fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\nContent-Length: %d\r\n", method, path, host, len(body))
	if body != nil {
		req.WriteString("Content-Type: application/json\r\n")
	}
	if token != "" {
		req.WriteString(token + "\r\n")
	}
	req.WriteString("\r\n")
	req.Write(body)
	if _, err := conn.Write(req.Bytes()); err != nil {
		return 0, nil, err
	}
	return readResponse(bufio.NewReader(io.LimitReader(conn, 1<<20)))
}

// readResponse reads an HTTP/1.1 answer: status line, headers, and a body
// sized by Content-Length, chunked, or ending at EOF.
func readResponse(r *bufio.Reader) (int, []byte, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, nil, fmt.Errorf("reading the answer: %w", err)
	}
	f := strings.Fields(line)
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/1.") {
		return 0, nil, fmt.Errorf("not an HTTP answer: %q", strings.TrimSpace(line))
	}
	code, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, nil, fmt.Errorf("not an HTTP answer: %q", strings.TrimSpace(line))
	}
	length, chunked := -1, false
	for {
		h, err := r.ReadString('\n')
		if err != nil {
			return 0, nil, fmt.Errorf("reading the answer: %w", err)
		}
		h = strings.TrimSpace(h)
		if h == "" {
			break
		}
		k, v, _ := strings.Cut(h, ":")
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "content-length":
			length, _ = strconv.Atoi(strings.TrimSpace(v))
		case "transfer-encoding":
			chunked = strings.Contains(strings.ToLower(v), "chunked")
		}
	}
	switch {
	case chunked:
		var body []byte
		for {
			sz, err := r.ReadString('\n')
			if err != nil {
				return code, body, err
			}
			sz, _, _ = strings.Cut(strings.TrimSpace(sz), ";")
			n, err := strconv.ParseInt(sz, 16, 32)
			if err != nil || n < 0 {
				return code, body, fmt.Errorf("bad chunk size %q", sz)
			}
			if n == 0 {
				return code, body, nil
			}
			chunk := make([]byte, n+2)
			if _, err := io.ReadFull(r, chunk); err != nil {
				return code, body, err
			}
			body = append(body, chunk[:n]...)
		}
	case length >= 0:
		body := make([]byte, length)
		_, err := io.ReadFull(r, body)
		return code, body, err
	default:
		body, err := io.ReadAll(r)
		return code, body, err
	}
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
	cli, err := newDialer(h.EtcdCACert, h.EtcdCert, h.EtcdKey, "")
	tlsOn := cli != nil && cli.tls != nil
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

func revokeAt(ctx context.Context, cli *dialer, base string, h BackendHello, id int64) error {
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
func postJSON(ctx context.Context, cli *dialer, url, token string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	header := ""
	if token != "" {
		header = "Authorization: " + token
	}
	code, data, err := cli.do(ctx, "POST", url, header, b)
	if err != nil {
		return err
	}
	if code != 200 {
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
			msg = "HTTP " + strconv.Itoa(code)
		}
		return fmt.Errorf("HTTP %d: %s", code, msg)
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// releaseConsul frees the key held by the session (at once, without a
// lock-delay), then destroys the session, on the first address that
// answers, like leaderrun's own release: only the destroy must succeed.
func releaseConsul(ctx context.Context, h BackendHello, handle string) error {
	rest, ok := strings.CutPrefix(handle, "consul:")
	session, key, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || session == "" || key == "" {
		return fmt.Errorf("consul: %q is not a lease handle", handle)
	}
	list := h.ConsulAddr
	if list == "" {
		list = os.Getenv("CONSUL_HTTP_ADDR")
	}
	if list == "" {
		list = "127.0.0.1:8500"
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
	cli, err := newDialer(h.ConsulCACert, h.ConsulClientCert, h.ConsulClientKey, h.ConsulTLSServerName)
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
	if h.ConsulDatacenter != "" {
		dc = "dc=" + url.QueryEscape(h.ConsulDatacenter)
	}
	var errs []error
	for _, a := range strings.Split(list, ",") {
		base := endpointURL(a, tlsOn)
		// The KV release may fail (the key moved on); the destroy decides.
		_, _, _ = cli.do(ctx, "PUT", base+"/v1/kv/"+escapePath(key)+"?release="+url.QueryEscape(session)+amp(dc), header, nil)
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
func consulToken(h BackendHello) (string, error) {
	t, _, err := acltoken.Read(h.ConsulTokenFile, h.ConsulToken)
	if err != nil {
		return "", fmt.Errorf("consul: token file: %w", err)
	}
	return t, nil
}

// escapePath escapes each segment of a KV path.
func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

func amp(q string) string {
	if q == "" {
		return ""
	}
	return "&" + q
}

func query(q string) string {
	if q == "" {
		return ""
	}
	return "?" + q
}
