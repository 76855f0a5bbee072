//go:build linux

package testcluster

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Raft timing for the test clusters. Loopback round trips take microseconds,
// so etcd's defaults (100ms/1000ms), sized for real networks, would only make
// leader elections slow. The election timeout stays ten heartbeats, as etcd
// recommends, so a loaded machine does not trigger spurious elections.
//
// etcd derives its minimum lease TTL from these: ceil(1.5 * election
// timeout) = ceil(750ms) = 1s. A lease granted with a smaller TTL is raised to
// 1 second (with the defaults it would be 2 seconds).
const (
	etcdHeartbeatMillis = 50
	etcdElectionMillis  = 500

	// EtcdMinLeaseTTL is the smallest lease TTL the clusters started by
	// StartEtcd grant; see the Raft timing above.
	EtcdMinLeaseTTL = time.Second
)

// Etcd is an etcd cluster started by StartEtcd. Its methods report failures
// through the test that started it, so call them from that test's goroutine.
type Etcd struct {
	t       testing.TB
	members []*etcdMember
}

// etcdMember is one member's fixed identity: restarts reuse all of it.
type etcdMember struct {
	name       string
	dataDir    string
	clientPort int
	peerPort   int
	cluster    string // the --initial-cluster value shared by all members
	token      string // the --initial-cluster-token of this cluster
	extra      []string
	tls        *TLSFiles // when set, the member also serves clients over TLS on tlsPort
	tlsPort    int
	proc       *proc
}

// TLSFiles are a server's certificate, key and the CA it trusts for client
// certificates, as PEM files.
type TLSFiles struct{ Cert, Key, CA string }

// httpClient is used for readiness probes. Keep-alives are off because
// members are killed and restarted under the tests' feet; a fresh connection
// per probe never trips over a dead one.
var httpClient = &http.Client{
	Timeout:   httpTimeout,
	Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
}

// StartEtcd starts an etcd cluster of the given number of members (1 or 3 in
// practice) on free 127.0.0.1 ports and returns once every member reports
// healthy. Data directories and logs live in t.TempDir(); the members are
// killed when the test ends, and their logs are printed if it failed.
func StartEtcd(t testing.TB, members int) *Etcd {
	t.Helper()
	return StartEtcdWith(t, members)
}

// StartEtcdTLS starts a one-member etcd that serves clients on plain HTTP
// (Endpoints) and also over TLS with files, requiring a client certificate
// signed by files.CA (TLSEndpoints).
func StartEtcdTLS(t testing.TB, files TLSFiles) *Etcd {
	t.Helper()
	return startEtcd(t, 1, &files, nil)
}

// StartEtcdWith is StartEtcd with extra etcd flags for every member (e.g.
// --auth-token), kept across restarts.
func StartEtcdWith(t testing.TB, members int, extra ...string) *Etcd {
	t.Helper()
	return startEtcd(t, members, nil, extra)
}

func startEtcd(t testing.TB, members int, files *TLSFiles, extra []string) *Etcd {
	t.Helper()
	if members < 1 {
		t.Fatalf("testcluster: StartEtcd needs at least 1 member, got %d", members)
	}
	bin := Bin(t, "etcd")
	for attempt := 1; ; attempt++ {
		e, err := startEtcdOnce(t, bin, members, files, extra)
		if err == nil {
			return e
		}
		conflict := false
		for _, m := range e.members {
			conflict = conflict || m.proc.portConflict()
		}
		killAll(e.procs())
		if conflict && attempt < 3 {
			t.Logf("testcluster: etcd lost a port race (%v); retrying with new ports", err)
			continue
		}
		t.Fatalf("testcluster: etcd cluster of %d did not start: %v", members, err)
	}
}

// startEtcdOnce makes one attempt with fresh ports and directories. It
// returns the cluster even on error so the caller can inspect and kill it.
func startEtcdOnce(t testing.TB, bin string, n int, files *TLSFiles, extra []string) (*Etcd, error) {
	t.Helper()
	dir := t.TempDir()
	e := &Etcd{t: t}
	ports, err := freePorts(3*n, false)
	if err != nil {
		return e, err
	}
	token := randomHex(8) // keeps stray peers from another cluster out
	var cluster []string
	for i := 0; i < n; i++ {
		m := &etcdMember{
			name:       fmt.Sprintf("m%d", i),
			dataDir:    filepath.Join(dir, fmt.Sprintf("m%d.data", i)),
			clientPort: ports[3*i],
			peerPort:   ports[3*i+1],
			token:      token,
			extra:      extra,
		}
		if files != nil {
			m.tls, m.tlsPort = files, ports[3*i+2]
		}
		m.proc = &proc{
			name:    "etcd member " + strconv.Itoa(i),
			bin:     bin,
			logPath: filepath.Join(dir, fmt.Sprintf("m%d.log", i)),
		}
		e.members = append(e.members, m)
		cluster = append(cluster, m.name+"="+m.peerURL())
	}
	t.Cleanup(func() {
		if t.Failed() {
			logProcs(t, e.procs())
		}
		killAll(e.procs())
	})
	for _, m := range e.members {
		m.cluster = strings.Join(cluster, ",")
		m.proc.args = m.args("new")
		if err := m.proc.start(); err != nil {
			return e, err
		}
	}
	return e, e.waitHealthy()
}

// peerURL is the member's Raft peer address.
func (m *etcdMember) peerURL() string { return fmt.Sprintf("http://127.0.0.1:%d", m.peerPort) }

// clientURL is the member's client (gRPC and HTTP) address.
func (m *etcdMember) clientURL() string { return fmt.Sprintf("http://127.0.0.1:%d", m.clientPort) }

// tlsURL is the member's client address over TLS, when it has one.
func (m *etcdMember) tlsURL() string { return fmt.Sprintf("https://127.0.0.1:%d", m.tlsPort) }

// args builds the member's command line. state is "new" for the first start
// and "existing" for restarts; etcd ignores the initial-cluster settings once
// the data directory exists, but "existing" states the intent.
func (m *etcdMember) args(state string) []string {
	listen := m.clientURL()
	var tlsArgs []string
	if m.tls != nil {
		listen += "," + m.tlsURL()
		tlsArgs = []string{"--cert-file", m.tls.Cert, "--key-file", m.tls.Key,
			"--trusted-ca-file", m.tls.CA, "--client-cert-auth"}
	}
	return append(append([]string{
		"--name", m.name,
		"--data-dir", m.dataDir,
		"--listen-client-urls", listen,
		"--advertise-client-urls", m.clientURL(),
		"--listen-peer-urls", m.peerURL(),
		"--initial-advertise-peer-urls", m.peerURL(),
		"--initial-cluster", m.cluster,
		"--initial-cluster-state", state,
		"--initial-cluster-token", m.token,
		"--heartbeat-interval", strconv.Itoa(etcdHeartbeatMillis),
		"--election-timeout", strconv.Itoa(etcdElectionMillis),
		// Without fsync, writes survive a killed process (the page cache
		// keeps them) but not a machine crash, which tests never cause.
		// It spares a shared disk a lot of sync traffic.
		"--unsafe-no-fsync",
		"--logger", "zap",
		"--log-outputs", "stderr",
		"--log-level", "info",
	}, tlsArgs...), m.extra...)
}

// procs lists the members' processes.
func (e *Etcd) procs() []*proc {
	ps := make([]*proc, len(e.members))
	for i, m := range e.members {
		ps[i] = m.proc
	}
	return ps
}

// Endpoints returns the client URLs of all members (running or not), e.g.
// "http://127.0.0.1:23791", in member order.
func (e *Etcd) Endpoints() []string {
	urls := make([]string, len(e.members))
	for i, m := range e.members {
		urls[i] = m.clientURL()
	}
	return urls
}

// TLSEndpoints returns the TLS client URLs of the members started by
// StartEtcdTLS.
func (e *Etcd) TLSEndpoints() []string {
	var urls []string
	for _, m := range e.members {
		if m.tls != nil {
			urls = append(urls, m.tlsURL())
		}
	}
	return urls
}

// Member returns the client URL of member i.
func (e *Etcd) Member(i int) string {
	return e.member(i).clientURL()
}

// member returns member i or fails the test on a bad index.
func (e *Etcd) member(i int) *etcdMember {
	e.t.Helper()
	if i < 0 || i >= len(e.members) {
		e.t.Fatalf("testcluster: etcd member %d out of range (cluster of %d)", i, len(e.members))
	}
	return e.members[i]
}

// Stop sends SIGTERM to member i and waits for it to exit (SIGKILL after a
// grace period, which fails the test). If the member may have been the
// leader, requests fail until a new one is elected: call WaitHealthy first
// when the test is not about that window.
func (e *Etcd) Stop(i int) {
	e.t.Helper()
	if err := e.member(i).proc.signal(syscall.SIGTERM, stopTimeout); err != nil {
		e.t.Fatalf("testcluster: %v", err)
	}
}

// Kill sends SIGKILL to member i, as a crash would, and waits for it to be
// gone. As with Stop, a new leader may have to be elected before the next
// request succeeds.
func (e *Etcd) Kill(i int) {
	e.t.Helper()
	e.member(i).proc.kill()
}

// Restart starts a stopped or killed member i again with its old data
// directory and ports. It returns once the member reports healthy, or, when
// too few members run for a quorum, once it accepts connections.
func (e *Etcd) Restart(i int) {
	e.t.Helper()
	m := e.member(i)
	if m.proc.running() {
		e.t.Fatalf("testcluster: Restart(%d): etcd member is still running", i)
	}
	m.proc.args = m.args("existing")
	if err := m.proc.start(); err != nil {
		e.t.Fatalf("testcluster: %v", err)
	}
	running := 0
	for _, o := range e.members {
		if o.proc.running() {
			running++
		}
	}
	err := poll(startTimeout, func() error {
		if err := exited([]*proc{m.proc}); err != nil {
			return err
		}
		if running > len(e.members)/2 {
			return etcdHealthy(m.clientURL())
		}
		return dialable(m.clientPort)
	})
	if err != nil {
		e.t.Fatalf("testcluster: restarted etcd member %d: %v", i, err)
	}
}

// WaitHealthy waits until every running member reports healthy through its
// /health endpoint (a leader is known and a linearizable read succeeds), and
// fails t if that takes too long or a member that should run has exited.
func (e *Etcd) WaitHealthy(t testing.TB) {
	t.Helper()
	if err := e.waitHealthy(); err != nil {
		t.Fatalf("testcluster: etcd cluster not healthy: %v", err)
	}
}

func (e *Etcd) waitHealthy() error {
	return poll(startTimeout, func() error {
		if err := exited(e.procs()); err != nil {
			return err
		}
		for _, m := range e.members {
			if !m.proc.running() {
				continue
			}
			if err := etcdHealthy(m.clientURL()); err != nil {
				return err
			}
		}
		return nil
	})
}

// etcdHealthy asks one member's /health endpoint.
func etcdHealthy(clientURL string) error {
	resp, err := httpClient.Get(clientURL + "/health")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return err
	}
	var h struct {
		Health string `json:"health"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(body, &h); err != nil || resp.StatusCode != http.StatusOK || h.Health != "true" {
		return fmt.Errorf("%s/health: %s %s", clientURL, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// dialable reports whether something accepts TCP connections on the port.
func dialable(port int) error {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), httpTimeout)
	if err != nil {
		return err
	}
	return c.Close()
}

// randomHex returns n random bytes in hex, for cluster tokens and secrets.
func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}
