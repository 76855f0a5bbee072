package guard

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/leaderrun/leaderrun/locker/kubernetes/kubewire"
)

func init() { releasers["kubernetes"] = releaseKubernetes }

// kubeAttempts bounds the writes of one release, as locker/kubernetes'
// release does.
const kubeAttempts = 3

// releaseKubernetes clears the holder of the Lease the handle
// "<namespace>/<name>/<term>" names if its term is still ours, leaving the
// marker of the term's own release, with an update conditioned on the
// resourceVersion read, as leaderrun's Locker.ReleaseHandle does: a
// conflict reads the Lease again, up to three writes. A Lease held by
// another term needs nothing; one freed by hand is marked, one deleted by
// hand created again, released (kubewire.Marks).
//
// The update is a PUT of the whole object as read, with the holder
// removed: the RBAC rule leaderrun documents grants get, create, update and
// watch, not patch, and the object is kept as raw JSON so that fields this
// code does not know survive the round trip.
func releaseKubernetes(ctx context.Context, hello BackendHello, handle string) error {
	var kh kubewire.Hello
	if err := settingsOf(hello, &kh); err != nil {
		return err
	}
	h := kh.Conn
	if h == nil || h.Server == "" {
		return ErrNoDirectRelease // leaderrun gave no connection: it releases itself
	}
	ns, name, term, err := kubewire.ParseHandle(handle)
	if err != nil {
		return fmt.Errorf("kubernetes: %w", err)
	}
	cli, err := kubeDialer(h)
	if err != nil {
		return fmt.Errorf("kubernetes: tls: %w", err)
	}
	auth, err := kubeAuth(h)
	if err != nil {
		return err
	}
	path := strings.TrimSuffix(h.Server, "/") + "/apis/coordination.k8s.io/v1/namespaces/" +
		url.PathEscape(ns) + "/leases/" + url.PathEscape(name)
	what := "lease " + ns + "/" + name
	for range kubeAttempts {
		code, body, err := cli.do(ctx, "GET", path, auth, nil)
		switch {
		case err != nil:
			return fmt.Errorf("kubernetes: get %s: %w", what, err)
		case code == 404:
			// Deleted by hand: a released Lease in its place tells a
			// standby that waits the holder out as a silent one that the
			// job is gone (kubewire.AnnReleased). One created meanwhile
			// by someone else stays as it is (409).
			code, body, err = cli.do(ctx, "POST", strings.TrimSuffix(path, "/"+url.PathEscape(name)), auth, kubeReleasedAnew(name, term))
			switch {
			case err != nil:
				return fmt.Errorf("kubernetes: create %s: %w", what, err)
			case code == 201 || code == 200 || code == 409:
				return nil
			}
			return fmt.Errorf("kubernetes: create %s: %w", what, kubeStatus(code, body))
		case code != 200:
			return fmt.Errorf("kubernetes: get %s: %w", what, kubeStatus(code, body))
		}
		next, ours, err := kubeReleased(body, term)
		if err != nil {
			return fmt.Errorf("kubernetes: get %s: %w", what, err)
		}
		if !ours {
			return nil // not ours any more
		}
		code, body, err = cli.do(ctx, "PUT", path, auth, next)
		switch {
		case err != nil:
			return fmt.Errorf("kubernetes: update %s: %w", what, err)
		case code == 200 || code == 404:
			return nil
		case code != 409:
			return fmt.Errorf("kubernetes: update %s: %w", what, kubeStatus(code, body))
		}
	}
	return fmt.Errorf("kubernetes: release %s: conflicting writes kept coming", what)
}

// kubeReleased reads a Lease and returns it without its holder and with
// the release marker of term, ready for an update conditioned on the
// resourceVersion it carries; ours is false when kubewire.Marks says the
// release must leave it alone.
func kubeReleased(lease []byte, term string) (next []byte, ours bool, err error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(lease, &obj); err != nil {
		return nil, false, err
	}
	var meta, spec map[string]json.RawMessage
	var ann map[string]string
	if err := unmarshalIfSet(obj["metadata"], &meta); err != nil {
		return nil, false, fmt.Errorf("metadata: %w", err)
	}
	if err := unmarshalIfSet(obj["spec"], &spec); err != nil {
		return nil, false, fmt.Errorf("spec: %w", err)
	}
	if err := unmarshalIfSet(meta["annotations"], &ann); err != nil {
		return nil, false, fmt.Errorf("annotations: %w", err)
	}
	var holder string
	if err := unmarshalIfSet(spec["holderIdentity"], &holder); err != nil {
		return nil, false, fmt.Errorf("holderIdentity: %w", err)
	}
	if !kubewire.Marks(holder, ann, term) {
		return nil, false, nil
	}
	if _, ok := meta["resourceVersion"]; !ok {
		return nil, false, errors.New("the Lease has no resourceVersion")
	}
	for _, f := range []string{"holderIdentity", "acquireTime", "renewTime"} {
		delete(spec, f)
	}
	for _, a := range kubewire.Released {
		delete(ann, a)
	}
	if ann == nil {
		ann = map[string]string{}
	}
	ann[kubewire.AnnReleased] = term
	if spec == nil {
		spec = map[string]json.RawMessage{}
	}
	if obj["spec"], err = json.Marshal(spec); err != nil {
		return nil, false, err
	}
	if meta["annotations"], err = json.Marshal(ann); err != nil {
		return nil, false, err
	}
	if obj["metadata"], err = json.Marshal(meta); err != nil {
		return nil, false, err
	}
	next, err = json.Marshal(obj)
	return next, true, err
}

// kubeReleasedAnew is a released Lease named name, to create in place of
// one deleted by hand.
func kubeReleasedAnew(name, term string) []byte {
	b, _ := json.Marshal(map[string]any{ // strings cannot fail to marshal
		"apiVersion": "coordination.k8s.io/v1",
		"kind":       "Lease",
		"metadata":   map[string]any{"name": name, "annotations": map[string]string{kubewire.AnnReleased: term}},
		"spec":       map[string]any{},
	})
	return b
}

func unmarshalIfSet(raw json.RawMessage, v any) error {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	return json.Unmarshal(raw, v)
}

// kubeStatus turns an API server's error answer into an error quoting its
// message (which names the user and the verb, never a credential).
func kubeStatus(code int, body []byte) error {
	var st struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(body, &st)
	msg := st.Message
	if msg == "" {
		msg = fmt.Sprintf("HTTP %d", code)
	}
	if len(msg) > 300 {
		msg = msg[:300]
	}
	return fmt.Errorf("HTTP %d: %s", code, msg)
}

// kubeDialer trusts the CA (data before file, as client-go) or the system
// roots, presents the client certificate if any, and checks the server's
// name unless told not to.
func kubeDialer(h *kubewire.Connection) (*dialer, error) {
	if !strings.HasPrefix(h.Server, "https://") {
		return &dialer{}, nil
	}
	cfg := &tls.Config{ServerName: h.ServerName, MinVersion: tls.VersionTLS12, InsecureSkipVerify: h.Insecure}
	ca := h.CAData
	if len(ca) == 0 && h.CAFile != "" {
		var err error
		if ca, err = os.ReadFile(h.CAFile); err != nil {
			return nil, err
		}
	}
	if len(ca) > 0 {
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(ca) {
			return nil, errors.New("the CA holds no PEM certificate")
		}
	}
	cert, key := h.CertData, h.KeyData
	var err error
	if len(cert) == 0 && h.CertFile != "" {
		if cert, err = os.ReadFile(h.CertFile); err != nil {
			return nil, err
		}
	}
	if len(key) == 0 && h.KeyFile != "" {
		if key, err = os.ReadFile(h.KeyFile); err != nil {
			return nil, err
		}
	}
	if len(cert) > 0 || len(key) > 0 {
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			// The error of X509KeyPair never quotes the key.
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return &dialer{tls: cfg}, nil
}

// kubeAuth is the Authorization header: the token file read now (a pod's
// token rotates), else the token.
func kubeAuth(h *kubewire.Connection) (string, error) {
	token := h.Token
	if h.TokenFile != "" {
		b, err := os.ReadFile(h.TokenFile)
		if err != nil {
			return "", fmt.Errorf("kubernetes: token file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if token == "" {
		return "", nil
	}
	return "Authorization: Bearer " + token, nil
}
