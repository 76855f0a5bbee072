package kubernetes

import (
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/leaderrun/leaderrun/locker"
)

// errCandidacyLost means a write we made while taking the key over was
// overtaken before we could confirm it. Acquire returns it wrapped; the
// supervisor retries.
var errCandidacyLost = errors.New("candidacy lost while taking over")

// classify wraps err from the call that used verb on our Lease, adding
// locker.ErrRefused when retrying will not help (RBAC refusal, rejected
// credentials, a TLS failure) so that leaderrun exits 125. The message names
// the verb and the resource, never the credential.
func (l *Locker) classify(verb string, err error) error {
	return l.classifyLease(verb, l.name, err)
}

// classifyLease is classify for the Lease name of our namespace.
func (l *Locker) classifyLease(verb, name string, err error) error {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("kubernetes: %w: not allowed to %s leases.coordination.k8s.io in namespace %q: the account needs get, create, update and watch on leases, and list and delete for the queue of candidates (RBAC)",
			locker.ErrRefused, verb, l.namespace)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("kubernetes: %w: %s lease %s/%s: the server rejected the credentials (expired or revoked token?)",
			locker.ErrRefused, verb, l.namespace, name)
	case transportRefusal(err):
		return fmt.Errorf("kubernetes: %w: %s lease %s/%s: %s", locker.ErrRefused, verb, l.namespace, name, oneLine(err.Error()))
	}
	return fmt.Errorf("kubernetes: %s lease %s/%s: %s", verb, l.namespace, name, oneLine(err.Error()))
}

// transportRefusal reports TLS errors that mean a wrong CA or certificate,
// as opposed to a connection that broke (worth retrying).
func transportRefusal(err error) bool {
	msg := err.Error()
	for _, s := range []string{"x509:", "tls: failed to verify", "tls: bad certificate", "tls: unknown certificate", "tls: certificate required", "server gave HTTP response to HTTPS client"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
