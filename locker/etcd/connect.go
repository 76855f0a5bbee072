package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

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
