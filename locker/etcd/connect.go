package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leaderrun/leaderrun/locker"
)

// errClosed is returned by calls on a closed Locker.
var errClosed = errors.New("etcd: locker is closed")

// conn is the Locker's etcd client, dialled on first use.
type conn struct {
	sem    chan struct{} // a one-slot lock that a context can abandon
	cli    *clientv3.Client
	cancel context.CancelFunc // ends the client's base context
	closed bool
}

func (c *conn) lock(ctx context.Context) error {
	select {
	case c.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *conn) unlock() { <-c.sem }

// client returns the etcd client, dialling it first if needed. The dial is
// bounded by ctx and DialTimeout: the etcd client dials lazily but
// authenticates eagerly, and a lazily dialled gRPC connection to a wrong
// transport would only show up as a timeout, so we probe first.
func (l *Locker) client(ctx context.Context) (*clientv3.Client, error) {
	if err := l.conn.lock(ctx); err != nil {
		return nil, err
	}
	defer l.conn.unlock()
	if l.conn.closed {
		return nil, errClosed
	}
	if l.conn.cli != nil {
		return l.conn.cli, nil
	}
	dctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	if err := l.probe(dctx); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	cli, cancelBase, err := l.dial(dctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if l.username != "" {
			return nil, classify(fmt.Sprintf("etcd: authenticate as user %q", l.username), err)
		}
		return nil, classify("etcd: connect", err)
	}
	l.conn.cli, l.conn.cancel = cli, cancelBase
	return cli, nil
}

// dial creates the etcd client so that ctx can abandon its authentication:
// the client's base context is cancelled if ctx ends before New returns,
// and left alone afterwards.
func (l *Locker) dial(ctx context.Context) (*clientv3.Client, context.CancelFunc, error) {
	base, cancelBase := context.WithCancel(context.Background())
	var mu sync.Mutex
	dialing := true
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if dialing {
			cancelBase()
		}
	})
	cfg := l.clientConfig()
	cfg.Context = base
	cli, err := clientv3.New(cfg)
	mu.Lock()
	dialing = false
	mu.Unlock()
	stop()
	if err == nil && base.Err() != nil {
		cli.Close()
		err = ctx.Err()
	}
	if err != nil {
		cancelBase()
		return nil, nil, err
	}
	return cli, cancelBase, nil
}

// Close frees the etcd client. It does not release a held lease: the lease
// runs out on its own, or another process calls ReleaseHandle.
func (l *Locker) Close() error {
	l.conn.sem <- struct{}{} // a dial in progress ends within DialTimeout
	defer l.conn.unlock()
	if l.conn.closed {
		return nil
	}
	l.conn.closed = true
	if l.conn.cli == nil {
		return nil
	}
	err := l.conn.cli.Close()
	l.conn.cancel()
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("etcd: close client: %w", err)
	}
	return nil
}

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
		return fmt.Errorf("%s: TLS handshake failed (is it a TLS endpoint, and do the CA and certificates match?): %w", ep.host, err), true
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

// refusals are etcd answers that retrying will not change.
var refusals = []error{
	rpctypes.ErrAuthFailed,
	rpctypes.ErrPermissionDenied,
	rpctypes.ErrPermissionNotGranted,
	rpctypes.ErrRoleNotGranted,
	rpctypes.ErrUserEmpty,
	rpctypes.ErrUserNotFound,
}

// refusal reports whether err means "retrying is pointless": bad
// credentials, missing permissions, or a transport that cannot work.
func refusal(err error) bool {
	if err == nil {
		return false
	}
	e := rpctypes.Error(err)
	for _, r := range refusals {
		if errors.Is(e, r) {
			return true
		}
	}
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.PermissionDenied:
			return true
		case codes.Unauthenticated:
			return !errors.Is(e, rpctypes.ErrInvalidAuthToken) // an expired token is refreshed
		}
	}
	msg := err.Error()
	for _, s := range []string{"authentication handshake failed", "x509:", "tls:", "http2: frame too large"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// classify wraps err with op, adding locker.ErrRefused when retrying will
// not help, so the supervisor exits 125 instead of retrying.
func classify(op string, err error) error {
	if refusal(err) {
		return fmt.Errorf("%s: %w: %w", op, locker.ErrRefused, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}
