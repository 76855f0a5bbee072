//go:build linux

package guard

// The guard's own HTTP/1.1 client, shared by the backends it releases over
// HTTP (etcd's JSON gateway, Consul, the Kubernetes API).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

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
