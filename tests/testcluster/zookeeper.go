//go:build linux

package testcluster

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// ZooKeeper servers come from Debian's zookeeper package (3.8) and run on
// the system Java; scripts/install-deps.sh installs both.
const (
	// slf4j-simple first: the folder holds several SLF4J bindings, and
	// the first on the class path wins (else the log may go nowhere).
	zkJars    = "/usr/share/java/slf4j-simple.jar:/usr/share/java/*"
	zkJar     = "/usr/share/java/zookeeper.jar"
	zkMain    = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
	zkHint    = "run scripts/install-deps.sh (Debian packages zookeeper and default-jre-headless)"
	zkEnvJava = "JAVA"
)

// ZooKeeperOptions configure StartZooKeeper.
type ZooKeeperOptions struct {
	// Servers is the ensemble size: 1 (standalone) or 3 in practice.
	Servers int
	// Tick is ZooKeeper's tickTime: sessions time out after 2 to 20 ticks
	// unless MaxSessionTimeout says otherwise. Zero means 200ms, so test
	// sessions last 0.4s to 4s.
	Tick time.Duration
	// SyncLimit is how many ticks a follower goes without hearing from the
	// leader before it drops out of the quorum (and all its clients). Zero
	// means 10.
	SyncLimit int
	// MaxSessionTimeout raises the longest session the servers grant; zero
	// keeps ZooKeeper's default of 20 ticks.
	MaxSessionTimeout time.Duration
}

// ZooKeeper is an ensemble started by StartZooKeeper. Its methods report
// failures through the test that started it.
type ZooKeeper struct {
	t       testing.TB
	opts    ZooKeeperOptions
	java    string
	servers []*zkServer
	// links[i][j] carries server i's quorum and election connections to
	// server j; cutting them partitions the servers (DESIGN §7: source
	// addresses cannot partition processes on one loopback).
	links [][]*peerLink
}

// zkServer is one server's fixed identity: restarts reuse all of it.
type zkServer struct {
	id           int // ZooKeeper's myid, 1-based
	dir          string
	clientPort   int
	quorumPort   int
	electionPort int
	proc         *proc
}

// ZooKeeperJava returns the java binary after checking that the ZooKeeper
// jars are installed. It skips the test when they are missing, or fails it
// under CI=true, as Bin does.
func ZooKeeperJava(t testing.TB) string {
	t.Helper()
	java := os.Getenv(zkEnvJava)
	var err error
	if java == "" {
		java, err = exec.LookPath("java")
	}
	if err == nil {
		_, err = os.Stat(zkJar)
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("testcluster: ZooKeeper unavailable: %v; %s", err, zkHint)
		}
		t.Skipf("testcluster: ZooKeeper unavailable: %v; %s", err, zkHint)
	}
	return java
}

// StartZooKeeper starts an ensemble on free 127.0.0.1 ports and returns once
// every server serves clients (4lw "srvr") and one of them leads. Data and
// logs live in t.TempDir(); the servers are killed when the test ends and
// their logs printed if it failed.
func StartZooKeeper(t testing.TB, opts ZooKeeperOptions) *ZooKeeper {
	t.Helper()
	if opts.Servers < 1 {
		opts.Servers = 1
	}
	if opts.Tick <= 0 {
		opts.Tick = 200 * time.Millisecond
	}
	if opts.SyncLimit <= 0 {
		opts.SyncLimit = 10
	}
	java := ZooKeeperJava(t)
	for attempt := 1; ; attempt++ {
		z, err := startZooKeeperOnce(t, java, opts)
		if err == nil {
			return z
		}
		conflict := false
		for _, s := range z.servers {
			conflict = conflict || s.proc.portConflict() || strings.Contains(s.proc.logTail(), "BindException")
		}
		z.close()
		if conflict && attempt < 3 {
			t.Logf("testcluster: ZooKeeper lost a port race (%v); retrying with new ports", err)
			continue
		}
		t.Fatalf("testcluster: ZooKeeper ensemble of %d did not start: %v", opts.Servers, err)
	}
}

func startZooKeeperOnce(t testing.TB, java string, opts ZooKeeperOptions) (*ZooKeeper, error) {
	t.Helper()
	dir := t.TempDir()
	z := &ZooKeeper{t: t, opts: opts, java: java}
	n := opts.Servers
	ports, err := freePorts(3*n, false)
	if err != nil {
		return z, err
	}
	for i := 0; i < n; i++ {
		s := &zkServer{
			id:           i + 1,
			dir:          filepath.Join(dir, fmt.Sprintf("zk%d", i+1)),
			clientPort:   ports[3*i],
			quorumPort:   ports[3*i+1],
			electionPort: ports[3*i+2],
		}
		s.proc = &proc{
			name:    fmt.Sprintf("zookeeper server %d", s.id),
			bin:     java,
			logPath: filepath.Join(dir, fmt.Sprintf("zk%d.log", s.id)),
		}
		z.servers = append(z.servers, s)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logProcs(t, z.procs())
		}
		z.close()
	})
	if n > 1 {
		z.links = make([][]*peerLink, n)
		for i := range z.links {
			z.links[i] = make([]*peerLink, n)
			for j := range z.links[i] {
				if i == j {
					continue
				}
				l, err := newPeerLink(z.servers[j])
				if err != nil {
					return z, err
				}
				z.links[i][j] = l
			}
		}
	}
	for i, s := range z.servers {
		if err := os.MkdirAll(filepath.Join(s.dir, "data"), 0o755); err != nil {
			return z, err
		}
		if err := os.WriteFile(filepath.Join(s.dir, "data", "myid"), []byte(strconv.Itoa(s.id)+"\n"), 0o644); err != nil {
			return z, err
		}
		if err := os.WriteFile(filepath.Join(s.dir, "zoo.cfg"), z.config(i), 0o644); err != nil {
			return z, err
		}
		s.proc.args = z.javaArgs(s)
		if err := s.proc.start(); err != nil {
			return z, err
		}
	}
	return z, z.waitServing()
}

// config is server i's zoo.cfg. Each server reaches every other one through
// its own peerLink, so one server can be cut off from the rest.
func (z *ZooKeeper) config(i int) []byte {
	s := z.servers[i]
	var b strings.Builder
	fmt.Fprintf(&b, "tickTime=%d\n", z.opts.Tick.Milliseconds())
	fmt.Fprintf(&b, "initLimit=%d\nsyncLimit=%d\n", 50, z.opts.SyncLimit)
	fmt.Fprintf(&b, "dataDir=%s\n", filepath.Join(s.dir, "data"))
	fmt.Fprintf(&b, "clientPort=%d\nclientPortAddress=127.0.0.1\n", s.clientPort)
	if z.opts.MaxSessionTimeout > 0 {
		fmt.Fprintf(&b, "maxSessionTimeout=%d\n", z.opts.MaxSessionTimeout.Milliseconds())
	}
	// Every candidate of a test runs on 127.0.0.1 and holds two
	// connections (its campaign's session and its reader's): the default
	// cap of 60 per address and server refused the benchmark's 100.
	b.WriteString("maxClientCnxns=0\n")
	b.WriteString("4lw.commands.whitelist=ruok,mntr,srvr\n")
	b.WriteString("admin.enableServer=false\n")
	b.WriteString("reconfigEnabled=false\n")
	b.WriteString("standaloneEnabled=true\n")
	// A killed process keeps what it wrote in the page cache; tests never
	// crash the machine, and a shared disk is spared the syncs.
	b.WriteString("forceSync=no\npreAllocSize=1024\n")
	b.WriteString("autopurge.purgeInterval=0\n")
	if len(z.servers) > 1 {
		for j, o := range z.servers {
			q, e := o.quorumPort, o.electionPort
			if j != i {
				q, e = z.links[i][j].quorumPort(), z.links[i][j].electionPort()
			}
			fmt.Fprintf(&b, "server.%d=127.0.0.1:%d:%d\n", o.id, q, e)
		}
	}
	return []byte(b.String())
}

// javaArgs runs one server with a small heap and quick start-up.
func (z *ZooKeeper) javaArgs(s *zkServer) []string {
	return []string{
		"-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dorg.slf4j.simpleLogger.showDateTime=true",
		"-cp", zkJars, zkMain, filepath.Join(s.dir, "zoo.cfg"),
	}
}

func (z *ZooKeeper) procs() []*proc {
	ps := make([]*proc, len(z.servers))
	for i, s := range z.servers {
		ps[i] = s.proc
	}
	return ps
}

func (z *ZooKeeper) close() {
	killAll(z.procs())
	for _, row := range z.links {
		for _, l := range row {
			if l != nil {
				l.close()
			}
		}
	}
}

func (z *ZooKeeper) server(i int) *zkServer {
	z.t.Helper()
	if i < 0 || i >= len(z.servers) {
		z.t.Fatalf("testcluster: ZooKeeper server %d out of range (ensemble of %d)", i, len(z.servers))
	}
	return z.servers[i]
}

// Tick is the ensemble's tickTime.
func (z *ZooKeeper) Tick() time.Duration { return z.opts.Tick }

// Addr is server i's client address, 127.0.0.1:port.
func (z *ZooKeeper) Addr(i int) string {
	return fmt.Sprintf("127.0.0.1:%d", z.server(i).clientPort)
}

// Addrs are all servers' client addresses, in server order.
func (z *ZooKeeper) Addrs() []string {
	out := make([]string, len(z.servers))
	for i := range z.servers {
		out[i] = z.Addr(i)
	}
	return out
}

// Stop sends SIGTERM to server i and waits for it to exit.
func (z *ZooKeeper) Stop(i int) {
	z.t.Helper()
	if err := z.server(i).proc.signal(syscall.SIGTERM, stopTimeout); err != nil {
		z.t.Fatalf("testcluster: %v", err)
	}
}

// Kill SIGKILLs server i, as a crash would, and waits for it to be gone.
func (z *ZooKeeper) Kill(i int) {
	z.t.Helper()
	z.server(i).proc.kill()
}

// Restart starts a stopped or killed server again with its data and ports.
// It returns once the server accepts connections; call WaitServing to wait
// for it to rejoin the quorum.
func (z *ZooKeeper) Restart(i int) {
	z.t.Helper()
	s := z.server(i)
	if s.proc.running() {
		z.t.Fatalf("testcluster: Restart(%d): ZooKeeper server is still running", i)
	}
	if err := s.proc.start(); err != nil {
		z.t.Fatalf("testcluster: %v", err)
	}
	if err := poll(startTimeout, func() error {
		if err := exited([]*proc{s.proc}); err != nil {
			return err
		}
		return dialable(s.clientPort)
	}); err != nil {
		z.t.Fatalf("testcluster: restarted ZooKeeper server %d: %v", i, err)
	}
}

// Isolate cuts server i off from every other server, both ways, by
// blackholing its quorum and election connections: they stay open and move
// no byte, as across a partition. Its clients stay connected to it; it keeps
// answering them from its own state until it notices the silence (SyncLimit
// ticks) and drops out of the quorum.
func (z *ZooKeeper) Isolate(i int) {
	z.t.Helper()
	z.server(i)
	for j := range z.servers {
		if j != i {
			z.links[i][j].cut()
			z.links[j][i].cut()
		}
	}
}

// Heal undoes Isolate: blackholed connections are closed, new ones flow.
func (z *ZooKeeper) Heal(i int) {
	z.t.Helper()
	z.server(i)
	for j := range z.servers {
		if j != i {
			z.links[i][j].heal()
			z.links[j][i].heal()
		}
	}
}

// Leader returns the index of the server that leads the ensemble (0 for a
// standalone server), waiting for one to be elected.
func (z *ZooKeeper) Leader(t testing.TB) int {
	t.Helper()
	leader := -1
	err := poll(startTimeout, func() error {
		for i, s := range z.servers {
			if !s.proc.running() {
				continue
			}
			mode, err := zkMode(s.clientPort)
			if err == nil && (mode == "leader" || mode == "standalone") {
				leader = i
				return nil
			}
		}
		return fmt.Errorf("no server leads")
	})
	if err != nil {
		t.Fatalf("testcluster: ZooKeeper: %v", err)
	}
	return leader
}

// Mode is what server i says it is: "leader", "follower", "standalone", or
// an error while it does not serve clients.
func (z *ZooKeeper) Mode(i int) (string, error) {
	return zkMode(z.server(i).clientPort)
}

// WaitServing waits until every running server serves clients and one of
// them leads.
func (z *ZooKeeper) WaitServing(t testing.TB) {
	t.Helper()
	if err := z.waitServing(); err != nil {
		t.Fatalf("testcluster: ZooKeeper ensemble not serving: %v", err)
	}
}

func (z *ZooKeeper) waitServing() error {
	return poll(startTimeout, func() error {
		if err := exited(z.procs()); err != nil {
			return err
		}
		leaders := 0
		for _, s := range z.servers {
			if !s.proc.running() {
				continue
			}
			mode, err := zkMode(s.clientPort)
			if err != nil {
				return fmt.Errorf("server %d: %w", s.id, err)
			}
			if mode == "leader" || mode == "standalone" {
				leaders++
			}
		}
		if leaders != 1 {
			return fmt.Errorf("%d servers lead", leaders)
		}
		return nil
	})
}

// zkMode asks a server "srvr" and returns its Mode line.
func zkMode(port int) (string, error) {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), httpTimeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(httpTimeout))
	if _, err := c.Write([]byte("srvr")); err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(c, 4096))
	if err != nil && len(b) == 0 {
		return "", err
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if mode, ok := strings.CutPrefix(sc.Text(), "Mode: "); ok {
			return strings.TrimSpace(mode), nil
		}
	}
	return "", fmt.Errorf("not serving: %s", strings.TrimSpace(string(b)))
}

// peerLink forwards one server's quorum and election connections to
// another server, and can blackhole them.
type peerLink struct {
	quorum, election *blackholeProxy
}

func newPeerLink(to *zkServer) (*peerLink, error) {
	q, err := newBlackholeProxy(fmt.Sprintf("127.0.0.1:%d", to.quorumPort))
	if err != nil {
		return nil, err
	}
	e, err := newBlackholeProxy(fmt.Sprintf("127.0.0.1:%d", to.electionPort))
	if err != nil {
		q.close()
		return nil, err
	}
	return &peerLink{quorum: q, election: e}, nil
}

func (l *peerLink) quorumPort() int   { return l.quorum.port() }
func (l *peerLink) electionPort() int { return l.election.port() }
func (l *peerLink) cut()              { l.quorum.cut(); l.election.cut() }
func (l *peerLink) heal()             { l.quorum.heal(); l.election.heal() }
func (l *peerLink) close()            { l.quorum.close(); l.election.close() }

// blackholeProxy is a TCP forwarder that can stop moving bytes while
// keeping its connections open.
type blackholeProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	cutOff bool
	gate   chan struct{} // closed while bytes may flow
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

func newBlackholeProxy(target string) (*blackholeProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &blackholeProxy{ln: ln, target: target, gate: make(chan struct{}), conns: map[net.Conn]bool{}}
	close(p.gate)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *blackholeProxy) port() int { return p.ln.Addr().(*net.TCPAddr).Port }

func (p *blackholeProxy) accept() {
	defer p.wg.Done()
	testsupport.AcceptEach(p.ln, func(c net.Conn) {
		p.mu.Lock()
		p.conns[c] = true
		p.mu.Unlock()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.forward(c)
		}()
	})
}

func (p *blackholeProxy) forward(c net.Conn) {
	defer p.drop(c)
	if !p.wait() {
		return
	}
	// A server opens its quorum port only once it leads. A real follower
	// that finds it closed retries the connect; here the connect already
	// succeeded (to us), so we retry on its behalf instead of handing it an
	// EOF, which would send it back to the election.
	var s net.Conn
	err := poll(3*time.Second, func() error {
		var err error
		s, err = net.DialTimeout("tcp", p.target, httpTimeout)
		return err
	})
	if err != nil || !p.wait() {
		if s != nil {
			s.Close()
		}
		return
	}
	p.mu.Lock()
	p.conns[s] = true
	p.mu.Unlock()
	defer p.drop(s)
	done := make(chan struct{}, 2)
	go func() { p.copy(s, c); done <- struct{}{} }()
	go func() { p.copy(c, s); done <- struct{}{} }()
	<-done
	c.Close()
	s.Close()
	<-done
}

// copy moves bytes from src to dst, holding them while the proxy is cut.
func (p *blackholeProxy) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// wait blocks while the proxy is cut; it reports false once the bytes held
// must be thrown away (healed or closed).
func (p *blackholeProxy) wait() bool {
	p.mu.Lock()
	gate, cut := p.gate, p.cutOff
	p.mu.Unlock()
	<-gate
	return !cut
}

func (p *blackholeProxy) drop(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *blackholeProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cutOff {
		p.cutOff = true
		p.gate = make(chan struct{})
	}
}

// heal closes the connections that were held (a partition that outlived
// their timeouts leaves them dead) and lets new ones through.
func (p *blackholeProxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cutOff {
		return
	}
	for c := range p.conns {
		c.Close()
	}
	close(p.gate)
	p.gate = make(chan struct{})
	close(p.gate)
	p.cutOff = false
}

func (p *blackholeProxy) close() {
	p.ln.Close()
	p.heal()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
