package etcd

import (
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leaderrun/leaderrun/locker"
)

// errClosed is returned by calls on a closed Locker.
var errClosed = errors.New("etcd: locker is closed")

// errCandidacyLost means our own election key or lease disappeared while we
// waited for our turn. Acquire returns it wrapped; the supervisor retries.
var errCandidacyLost = errors.New("candidacy lost while waiting")

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
	for _, s := range transportRefusals {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// transportRefusals are fragments of TLS and HTTP/2 errors that mean a
// wrong transport or certificate, as opposed to a connection that broke
// mid-handshake (EOF, reset), which is worth retrying.
var transportRefusals = []string{
	"x509:",
	"tls: failed to verify",
	"tls: bad certificate",
	"tls: unknown certificate",
	"tls: certificate required",
	"tls: handshake failure",
	"tls: protocol version",
	"tls: first record does not look like a TLS handshake",
	"http2: frame too large", // plaintext towards a TLS port
}

// classify wraps err with op, adding locker.ErrRefused when retrying will
// not help, so the supervisor exits 125 instead of retrying.
func classify(op string, err error) error {
	if refusal(err) {
		return fmt.Errorf("%s: %w: %w", op, locker.ErrRefused, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// leaseGone reports whether err says the lease no longer exists.
func leaseGone(err error) bool {
	return err != nil && errors.Is(rpctypes.Error(err), rpctypes.ErrLeaseNotFound)
}
