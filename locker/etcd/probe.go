package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/leaderrun/leaderrun/locker"
)

// probe returns nil once one endpoint accepts the transport we are
// configured for. It fails with ErrRefused when no endpoint works and at
// least one of them answered with the wrong transport or rejected our
// certificates, and with a plain error when none could be reached.
func (l *Locker) probe(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		err     error
		refused bool
	}
	results := make(chan result, len(l.endpoints))
	for _, ep := range l.endpoints {
		go func() {
			err, refused := l.probeOne(ctx, ep)
			results <- result{err, refused}
		}()
	}
	ok := false
	var refused, unreachable []string
	for range l.endpoints { // wait for every prober: none is left behind
		r := <-results
		switch {
		case r.err == nil:
			ok = true
			cancel()
		case r.refused:
			refused = append(refused, r.err.Error())
		default:
			unreachable = append(unreachable, r.err.Error())
		}
	}
	switch {
	case ok:
		return nil
	case len(refused) > 0:
		return fmt.Errorf("etcd: %w: %s", locker.ErrRefused, strings.Join(refused, "; "))
	default:
		return fmt.Errorf("etcd: no endpoint reachable: %s", strings.Join(unreachable, "; "))
	}
}

// plaintextCheck bounds the handshake that looks for a TLS-only server
// behind an endpoint we would talk plaintext to.
const plaintextCheck = time.Second

// probeOne connects to one endpoint. refused is true when the endpoint
// answered in a way no retry will change: a TLS endpoint reached without TLS
// or the reverse, or certificates that do not verify.
func (l *Locker) probeOne(ctx context.Context, ep endpoint) (err error, refused bool) {
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", ep.host)
	if err != nil {
		return err, false
	}
	defer raw.Close()
	host, _, _ := net.SplitHostPort(ep.host)

	if l.tls == nil {
		// A server that completes a TLS handshake wants TLS; a plaintext
		// etcd drops the connection at once.
		hctx, cancel := context.WithTimeout(ctx, plaintextCheck)
		defer cancel()
		tc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, ServerName: host}) //nolint:gosec // only asks whether the server speaks TLS
		if tc.HandshakeContext(hctx) == nil {
			return fmt.Errorf("%s speaks TLS but no TLS is configured: use https:// or give a CA file", ep.host), true
		}
		return nil, false
	}

	cfg := l.tls.Clone()
	cfg.ServerName = host
	tc := tls.Client(raw, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: TLS handshake: %w", ep.host, ctx.Err()), false
		}
		// Only the server's word ends it: an alert, a certificate that
		// does not verify, an answer that is not TLS, or a plaintext
		// server (which just drops a TLS hello). A handshake cut short
		// by the network or a restarting server is retried.
		if tlsRefusal(err) || l.speaksPlaintext(ctx, ep.host) {
			return fmt.Errorf("%s: TLS handshake failed (is it a TLS endpoint, and do the CA and certificates match?): %w", ep.host, err), true
		}
		return fmt.Errorf("%s: TLS handshake cut short: %w", ep.host, err), false
	}
	// With TLS 1.3 a server that rejects our client certificate says so
	// only after the handshake: read briefly for that alert.
	_ = raw.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	var b [1]byte
	if _, err := tc.Read(b[:]); err != nil {
		var alert tls.AlertError
		if errors.As(err, &alert) || strings.Contains(err.Error(), "tls:") {
			return fmt.Errorf("%s: TLS: %w", ep.host, err), true
		}
	}
	return nil, false
}

// tlsRefusal reports whether a failed handshake was the server's answer
// rather than a broken connection.
func tlsRefusal(err error) bool {
	var (
		alert   tls.AlertError
		record  tls.RecordHeaderError
		verify  *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
	)
	return errors.As(err, &alert) || errors.As(err, &record) || errors.As(err, &verify) ||
		errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid) ||
		strings.Contains(err.Error(), "tls:") || strings.Contains(err.Error(), "x509:")
}

// h2Preface is the HTTP/2 client preface followed by an empty SETTINGS
// frame, what a gRPC client sends on a plaintext connection.
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"

// speaksPlaintext reports whether host answers a plaintext HTTP/2 preface
// with a SETTINGS frame, as a plaintext etcd does.
func (l *Locker) speaksPlaintext(ctx context.Context, host string) bool {
	ctx, cancel := context.WithTimeout(ctx, plaintextCheck)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return false
	}
	defer c.Close()
	dl, _ := ctx.Deadline()
	_ = c.SetDeadline(dl)
	if _, err := c.Write([]byte(h2Preface)); err != nil {
		return false
	}
	var hdr [9]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return false
	}
	return hdr[3] == 0x4 // a SETTINGS frame
}
