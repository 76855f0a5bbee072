//go:build linux

package testcluster

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// ConsulOptions configures StartConsul.
type ConsulOptions struct {
	// Servers is the number of server agents: 1 (also when left 0) or 3.
	Servers int
	// ACL enables ACLs with default_policy "deny" and a generated initial
	// management token (see Consul.ManagementToken and Consul.CreateToken).
	ACL bool
	// SessionTTLMin lowers the servers' minimum session TTL (Consul's
	// default is 10s), e.g. "1s", for tests that want sessions to expire
	// quickly. Empty keeps the default.
	SessionTTLMin string
	// TLS, when set, also serves the HTTP API over TLS (HTTPSAddr) with
	// these files, requiring client certificates signed by TLS.CA.
	TLS *TLSFiles
}

// Consul is a Consul server cluster started by StartConsul. Its methods
// report failures through the test that started it, so call them from that
// test's goroutine.
type Consul struct {
	t       testing.TB
	opts    ConsulOptions
	token   string // initial management token, empty without ACLs
	servers []*consulServer
}

// consulServer is one server agent's fixed identity: restarts reuse it all.
type consulServer struct {
	httpPort  int
	httpsPort int
	proc      *proc
}

// StartConsul starts Consul server agents on free 127.0.0.1 ports and
// returns once a Raft leader is elected and every server answers KV reads.
//
// The agents are ordinary servers with data on disk (not -dev, which keeps
// Raft in memory), so Stop, Kill and Restart behave as in production. DNS,
// gRPC, HTTPS and WAN gossip are disabled, Connect, peering, the UI and the
// update check are off, and Raft runs at raft_multiplier 1 with fast LAN
// gossip so that elections and failure detection take about a second rather
// than several. Data and logs live in t.TempDir(); the agents are killed when
// the test ends, and their logs are printed if it failed.
func StartConsul(t testing.TB, opts ConsulOptions) *Consul {
	t.Helper()
	if opts.Servers == 0 {
		opts.Servers = 1
	}
	if opts.Servers != 1 && opts.Servers != 3 {
		t.Fatalf("testcluster: StartConsul supports 1 or 3 servers, got %d", opts.Servers)
	}
	bin := Bin(t, "consul")
	for attempt := 1; ; attempt++ {
		c, err := startConsulOnce(t, bin, opts)
		if err == nil {
			return c
		}
		conflict := false
		for _, s := range c.servers {
			conflict = conflict || s.proc.portConflict()
		}
		killAll(c.procs())
		if conflict && attempt < 3 {
			t.Logf("testcluster: consul lost a port race (%v); retrying with new ports", err)
			continue
		}
		t.Fatalf("testcluster: consul cluster of %d did not start: %v", opts.Servers, err)
	}
}

// startConsulOnce makes one attempt with fresh ports and directories. It
// returns the cluster even on error so the caller can inspect and kill it.
func startConsulOnce(t testing.TB, bin string, opts ConsulOptions) (*Consul, error) {
	t.Helper()
	dir := t.TempDir()
	c := &Consul{t: t, opts: opts}
	if opts.ACL {
		c.token = uuid()
	}
	n := opts.Servers
	// Per server: HTTP, Serf LAN (TCP and UDP), server RPC, HTTPS.
	ports, err := freePorts(4*n, true)
	if err != nil {
		return c, err
	}
	var serfAddrs []string
	for i := 0; i < n; i++ {
		serfAddrs = append(serfAddrs, fmt.Sprintf("127.0.0.1:%d", ports[4*i+1]))
	}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("s%d", i)
		var join []string // every other server; a restart rejoins the same way
		for j, a := range serfAddrs {
			if j != i {
				join = append(join, a)
			}
		}
		httpsPort := -1
		if opts.TLS != nil {
			httpsPort = ports[4*i+3]
		}
		cfg := c.agentConfig(name, filepath.Join(dir, name+".data"), ports[4*i], ports[4*i+1], ports[4*i+2], httpsPort, join)
		cfgPath := filepath.Join(dir, name+".json")
		if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
			return c, err
		}
		c.servers = append(c.servers, &consulServer{
			httpPort:  ports[4*i],
			httpsPort: httpsPort,
			proc: &proc{
				name:    "consul server " + strconv.Itoa(i),
				bin:     bin,
				args:    []string{"agent", "-config-file", cfgPath},
				logPath: filepath.Join(dir, name+".log"),
			},
		})
	}
	t.Cleanup(func() {
		if t.Failed() {
			logProcs(t, c.procs())
		}
		killAll(c.procs())
	})
	for _, s := range c.servers {
		if err := s.proc.start(); err != nil {
			return c, err
		}
	}
	return c, c.waitLeader()
}

// agentConfig renders one server's configuration as JSON, which Consul
// reads like HCL and which needs no escaping rules of our own.
func (c *Consul) agentConfig(name, dataDir string, httpPort, serfPort, serverPort, httpsPort int, join []string) []byte {
	cfg := map[string]any{
		"node_name":        name,
		"datacenter":       "dc1",
		"server":           true,
		"bootstrap_expect": c.opts.Servers,
		"data_dir":         dataDir,
		"bind_addr":        "127.0.0.1",
		"advertise_addr":   "127.0.0.1",
		"client_addr":      "127.0.0.1",
		"ports": map[string]any{
			"http":     httpPort,
			"serf_lan": serfPort,
			"server":   serverPort,
			"serf_wan": -1, // one datacenter: no WAN pool to bind
			"dns":      -1,
			"https":    httpsPort,
			"grpc":     -1,
			"grpc_tls": -1,
		},
		"log_level":                   "info",
		"disable_update_check":        true, // no calls home from a test
		"disable_anonymous_signature": true,
		"ui_config":                   map[string]any{"enabled": false},
		"connect":                     map[string]any{"enabled": false},
		"peering":                     map[string]any{"enabled": false},
		// Servers keep their Raft membership across a SIGTERM, and autopilot
		// must not drop a killed server: fault tests expect a fixed
		// three-voter cluster, and a re-added server would sit as a
		// non-voter until it is promoted.
		"leave_on_terminate":      false,
		"skip_leave_on_interrupt": true,
		"autopilot": map[string]any{
			"cleanup_dead_servers":      false,
			"server_stabilization_time": "1s",
		},
		// Production timing (multiplier 1) instead of the default 5, and LAN
		// gossip close to -dev's, since every peer is on loopback.
		"performance": map[string]any{"raft_multiplier": 1},
		// Every candidate of a test connects from 127.0.0.1, and the
		// default of 200 HTTP connections per client address refuses
		// the hundred candidates of the scale benchmark (each holds a few,
		// docs/BACKENDS.md) with "429 ... too many concurrent connections".
		"limits": map[string]any{"http_max_conns_per_client": 4096},
		"gossip_lan": map[string]any{
			"gossip_interval": "100ms",
			"probe_interval":  "250ms",
			"probe_timeout":   "200ms",
			"suspicion_mult":  3,
		},
	}
	if len(join) > 0 {
		cfg["retry_join"] = join
		cfg["retry_interval"] = "250ms" // default 30s would stall formation
	}
	if f := c.opts.TLS; f != nil {
		cfg["tls"] = map[string]any{"https": map[string]any{
			"ca_file": f.CA, "cert_file": f.Cert, "key_file": f.Key, "verify_incoming": true,
		}}
	}
	if c.opts.SessionTTLMin != "" {
		cfg["session_ttl_min"] = c.opts.SessionTTLMin
	}
	if c.opts.ACL {
		cfg["acl"] = map[string]any{
			"enabled":                  true,
			"default_policy":           "deny",
			"enable_token_persistence": false,
			"tokens": map[string]any{
				"initial_management": c.token,
				// The agent registers its own node with this token; without
				// it every anti-entropy sync logs an ACL error.
				"agent": c.token,
			},
		}
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		panic(err) // the map holds only plain values
	}
	return b
}

// procs lists the servers' processes.
func (c *Consul) procs() []*proc {
	ps := make([]*proc, len(c.servers))
	for i, s := range c.servers {
		ps[i] = s.proc
	}
	return ps
}

// server returns server i or fails the test on a bad index.
func (c *Consul) server(i int) *consulServer {
	c.t.Helper()
	if i < 0 || i >= len(c.servers) {
		c.t.Fatalf("testcluster: consul server %d out of range (cluster of %d)", i, len(c.servers))
	}
	return c.servers[i]
}

// HTTPAddr returns server i's HTTP API address as host:port, the form
// CONSUL_HTTP_ADDR and consul/api's Config.Address take.
func (c *Consul) HTTPAddr(i int) string {
	return fmt.Sprintf("127.0.0.1:%d", c.server(i).httpPort)
}

// HTTPSAddr returns server i's HTTPS API address as host:port, for a
// cluster started with ConsulOptions.TLS.
func (c *Consul) HTTPSAddr(i int) string {
	return fmt.Sprintf("127.0.0.1:%d", c.server(i).httpsPort)
}

// Addrs returns every server's HTTP API address (running or not) as
// host:port, in server order.
func (c *Consul) Addrs() []string {
	addrs := make([]string, len(c.servers))
	for i := range c.servers {
		addrs[i] = c.HTTPAddr(i)
	}
	return addrs
}

// ManagementToken returns the initial management token, or "" when the
// cluster runs without ACLs.
func (c *Consul) ManagementToken() string { return c.token }

// Stop sends SIGTERM to server i and waits for it to exit (SIGKILL after a
// grace period, which fails the test). The server does not leave the
// cluster, so Restart brings it back as the same Raft voter. If the server
// may have been the leader, requests fail until a new one is elected: call
// WaitLeader first when the test is not about that window.
func (c *Consul) Stop(i int) {
	c.t.Helper()
	if err := c.server(i).proc.signal(syscall.SIGTERM, stopTimeout); err != nil {
		c.t.Fatalf("testcluster: %v", err)
	}
}

// Kill sends SIGKILL to server i, as a crash would, and waits for it to be
// gone. As with Stop, a new leader may have to be elected before the next
// request succeeds.
func (c *Consul) Kill(i int) {
	c.t.Helper()
	c.server(i).proc.kill()
}

// Restart starts a stopped or killed server i again with its old data
// directory and ports. It returns once the server knows a leader and answers
// KV reads, or, when too few servers run for a quorum, once its HTTP port
// accepts connections.
func (c *Consul) Restart(i int) {
	c.t.Helper()
	s := c.server(i)
	if s.proc.running() {
		c.t.Fatalf("testcluster: Restart(%d): consul server is still running", i)
	}
	if err := s.proc.start(); err != nil {
		c.t.Fatalf("testcluster: %v", err)
	}
	running := 0
	for _, o := range c.servers {
		if o.proc.running() {
			running++
		}
	}
	err := poll(startTimeout, func() error {
		if err := exited([]*proc{s.proc}); err != nil {
			return err
		}
		if running > len(c.servers)/2 {
			return c.ready(s)
		}
		return dialable(s.httpPort)
	})
	if err != nil {
		c.t.Fatalf("testcluster: restarted consul server %d: %v", i, err)
	}
}

// WaitLeader waits until every running server reports a Raft leader and
// answers a consistent KV read (with the management token under ACLs, which
// also proves the ACL system is bootstrapped), and fails t if that takes too
// long or a server that should run has exited.
func (c *Consul) WaitLeader(t testing.TB) {
	t.Helper()
	if err := c.waitLeader(); err != nil {
		t.Fatalf("testcluster: consul cluster has no leader: %v", err)
	}
}

func (c *Consul) waitLeader() error {
	return poll(startTimeout, func() error {
		if err := exited(c.procs()); err != nil {
			return err
		}
		for _, s := range c.servers {
			if !s.proc.running() {
				continue
			}
			if err := c.ready(s); err != nil {
				return err
			}
		}
		return nil
	})
}

// ready checks one server: it names a leader, and a consistent read of a
// key that does not exist gets the expected 404 rather than an error.
func (c *Consul) ready(s *consulServer) error {
	base := fmt.Sprintf("http://127.0.0.1:%d", s.httpPort)
	status, body, err := c.do(http.MethodGet, base+"/v1/status/leader", c.token, nil)
	if err != nil {
		return err
	}
	var leader string
	if status != http.StatusOK || json.Unmarshal(body, &leader) != nil || leader == "" {
		return fmt.Errorf("%s: no leader yet: %d %s", base, status, strings.TrimSpace(string(body)))
	}
	status, body, err = c.do(http.MethodGet, base+"/v1/kv/testcluster/readiness-probe?consistent", c.token, nil)
	if err != nil {
		return err
	}
	if status != http.StatusNotFound && status != http.StatusOK {
		return fmt.Errorf("%s: KV read: %d %s", base, status, strings.TrimSpace(string(body)))
	}
	return nil
}

// CreateToken creates an ACL policy with the given rules (HCL, e.g.
// `key_prefix "app/" { policy = "write" }`) and a token holding it, and
// returns the token's secret. It waits until every running server resolves
// the new token, so a test may use it against any server at once. It fails
// t on a cluster started without ACLs.
func (c *Consul) CreateToken(t testing.TB, rules string) string {
	t.Helper()
	if !c.opts.ACL {
		t.Fatalf("testcluster: CreateToken needs a cluster started with ACL: true")
	}
	base := ""
	for i, s := range c.servers {
		if s.proc.running() {
			base = "http://" + c.HTTPAddr(i)
			break
		}
	}
	if base == "" {
		t.Fatalf("testcluster: CreateToken: no consul server is running")
	}

	var policy struct{ ID string }
	c.mustJSON(t, http.MethodPut, base+"/v1/acl/policy", map[string]any{
		"Name":        "testcluster-" + randomHex(6),
		"Description": "created by testcluster.CreateToken for " + t.Name(),
		"Rules":       rules,
	}, &policy)
	var token struct{ SecretID string }
	c.mustJSON(t, http.MethodPut, base+"/v1/acl/token", map[string]any{
		"Description": "created by testcluster.CreateToken for " + t.Name(),
		"Policies":    []map[string]string{{"ID": policy.ID}},
	}, &token)
	if token.SecretID == "" {
		t.Fatalf("testcluster: CreateToken: no SecretID in the response")
	}

	// Followers learn of the token through Raft replication, a moment
	// after the leader answered.
	err := poll(startTimeout, func() error {
		for i, s := range c.servers {
			if !s.proc.running() {
				continue
			}
			status, body, err := c.do(http.MethodGet, "http://"+c.HTTPAddr(i)+"/v1/acl/token/self", token.SecretID, nil)
			if err != nil {
				return err
			}
			if status != http.StatusOK {
				return fmt.Errorf("server %d does not resolve the new token yet: %d %s", i, status, strings.TrimSpace(string(body)))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("testcluster: CreateToken: %v", err)
	}
	return token.SecretID
}

// mustJSON sends a JSON request with the management token and decodes a
// 200 response into out, failing t otherwise.
func (c *Consul) mustJSON(t testing.TB, method, url string, in, out any) {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	status, body, err := c.do(method, url, c.token, b)
	if err != nil {
		t.Fatalf("testcluster: %s %s: %v", method, url, err)
	}
	if status != http.StatusOK {
		t.Fatalf("testcluster: %s %s: %d %s", method, url, status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("testcluster: %s %s: decoding %q: %v", method, url, body, err)
	}
}

// do performs one HTTP request against a server and returns the status and
// the (size-limited) body. The token goes in a header, never in the URL, so
// it cannot end up in a logged URL.
func (c *Consul) do(method, url, token string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("X-Consul-Token", token)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

// uuid returns a random (version 4) UUID, the form Consul requires for
// token secrets.
func uuid() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
