package consul

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/leaderrun/leaderrun/locker"
)

// fail wraps err from operation op for the caller: it adds context, marks
// errors that retrying cannot fix with locker.ErrRefused, and removes the
// token from the message.
func (l *Locker) fail(op string, err error) error {
	if refused(err) {
		err = &scrubbedError{msg: fmt.Sprintf("%s: %v: %v", op, locker.ErrRefused, err), err: err, refused: true}
	} else {
		err = fmt.Errorf("%s: %w", op, err)
	}
	return l.scrub(err)
}

// scrub makes sure the token never appears in err's message.
func (l *Locker) scrub(err error) error {
	if err == nil || l.token == "" || !strings.Contains(err.Error(), l.token) {
		return err
	}
	if s, ok := err.(*scrubbedError); ok {
		s.msg = redact(s.msg, l.token)
		return s
	}
	return &scrubbedError{msg: redact(err.Error(), l.token), err: err}
}

// redact replaces every occurrence of token in msg.
func redact(msg, token string) string {
	if token == "" {
		return msg
	}
	return strings.ReplaceAll(msg, token, "<redacted>")
}

// scrubbedError carries its own message while keeping the wrapped error
// (and, when refused, locker.ErrRefused) visible to errors.Is and errors.As.
type scrubbedError struct {
	msg     string
	err     error
	refused bool
}

func (e *scrubbedError) Error() string { return e.msg }

func (e *scrubbedError) Unwrap() []error {
	if e.refused {
		return []error{locker.ErrRefused, e.err}
	}
	return []error{e.err}
}

// refused reports whether err is one that retrying will not fix: the ACL
// system said no, or TLS cannot be established with this configuration.
// An unreachable agent or a server without a leader is not refused.
func refused(err error) bool {
	if err == nil {
		return false
	}
	var se api.StatusError
	if errors.As(err, &se) {
		switch se.Code {
		case http.StatusUnauthorized, http.StatusForbidden:
			return true
		}
		return deniedBody(se.Body)
	}
	var (
		unknownCA   x509.UnknownAuthorityError
		hostname    x509.HostnameError
		invalidCert x509.CertificateInvalidError
		verify      *tls.CertificateVerificationError
		record      tls.RecordHeaderError
		alert       tls.AlertError
	)
	switch {
	case errors.As(err, &unknownCA), errors.As(err, &hostname),
		errors.As(err, &invalidCert), errors.As(err, &verify),
		errors.As(err, &record), errors.As(err, &alert):
		return true
	}
	msg := err.Error()
	// net/http reports these as plain strings: TLS spoken to a plain HTTP
	// agent and the reverse.
	return strings.Contains(msg, "server gave HTTP response to HTTPS client") ||
		strings.Contains(msg, "malformed HTTP response") ||
		strings.Contains(msg, "remote error: tls:")
}

// deniedBody recognises refusals that reach us with another status code:
// ACL errors forwarded between servers as RPC errors, and Go's answer to
// plain HTTP sent to a TLS port.
func deniedBody(body string) bool {
	b := strings.ToLower(body)
	return strings.Contains(b, "permission denied") || strings.Contains(b, "acl not found") ||
		strings.Contains(b, "http request to an https server")
}
