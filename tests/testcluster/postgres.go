//go:build linux

package testcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgreSQL servers come from Debian's postgresql package (15); the
// binaries live outside PATH, in the directory pg_config --bindir names.
const (
	pgHint      = "run scripts/install-deps.sh (Debian package postgresql)"
	pgEnvBinDir = "LEADERRUN_PG_BINDIR"
	pgDefBinDir = "/usr/lib/postgresql/15/bin"
	// pgNobody runs the server when the tests run as root: initdb and
	// postgres refuse root.
	pgNobody = 65534
)

// Postgres is one PostgreSQL server started by StartPostgres or
// SharedPostgres, on 127.0.0.1 with trust authentication.
type Postgres struct {
	bindir string
	dir    string // owns data/ and the socket
	port   int
	proc   *proc
	cred   *syscall.Credential
	tb     testing.TB // nil for the shared server
}

// PostgresBinDir returns the directory of initdb and postgres. It skips
// the test when they are missing, or fails it under CI=true, as Bin does.
func PostgresBinDir(t testing.TB) string {
	t.Helper()
	dir, err := pgBinDir()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("testcluster: PostgreSQL unavailable: %v; %s", err, pgHint)
		}
		t.Skipf("testcluster: PostgreSQL unavailable: %v; %s", err, pgHint)
	}
	return dir
}

func pgBinDir() (string, error) {
	dirs := []string{os.Getenv(pgEnvBinDir), pgDefBinDir}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "initdb")); err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("no initdb and postgres in %s or pg_config --bindir", pgDefBinDir)
}

// StartPostgres starts a server of its own for the test, stopped when the
// test ends (its log printed if the test failed).
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	p, err := startPostgres(PostgresBinDir(t), t)
	if err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logProcs(t, []*proc{p.proc})
		}
		p.close()
	})
	return p
}

var sharedPG sharedServer[*Postgres]

// SharedPostgres is one server for the whole test binary (one per test
// package), started by the first test that asks; tests keep apart by their
// own keys. StopSharedPostgres, from TestMain, stops it; if the binary dies
// first the kernel kills it (PDEATHSIG) and its directory stays in $TMPDIR.
func SharedPostgres(t testing.TB) *Postgres {
	t.Helper()
	bindir := PostgresBinDir(t)
	return sharedPG.get(t, func() (*Postgres, error) { return startPostgres(bindir, nil) })
}

// StopSharedPostgres stops the server SharedPostgres started, if any.
func StopSharedPostgres() { sharedPG.stop() }

func startPostgres(bindir string, tb testing.TB) (*Postgres, error) {
	dir, err := os.MkdirTemp("", "leaderrun-pg-")
	if err != nil {
		return nil, err
	}
	p := &Postgres{bindir: bindir, dir: dir, tb: tb}
	if os.Geteuid() == 0 {
		p.cred = &syscall.Credential{Uid: pgNobody, Gid: pgNobody}
		if err := os.Chown(dir, pgNobody, pgNobody); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	initdb := exec.Command(filepath.Join(bindir, "initdb"), "-D", p.data(), "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred, Pdeathsig: syscall.SIGKILL}
	initdb.Env = pgEnv()
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	if err := p.serve(); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// serve starts the server on a fresh port, retrying a lost port race.
func (p *Postgres) serve() error {
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(1, false)
		if err != nil {
			return err
		}
		p.port = ports[0]
		if err := p.run(); err == nil {
			return nil
		} else if !p.proc.portConflict() || attempt == 3 {
			return fmt.Errorf("postgres did not start: %v\n%s", err, p.proc.logTail())
		}
	}
}

// run starts the server process on p.port and waits until it answers.
// fsync is off: a killed server loses nothing the kernel was handed, and
// only a crash of the whole host would need it.
func (p *Postgres) run() error {
	p.proc = &proc{
		name: "postgres", bin: filepath.Join(p.bindir, "postgres"), logPath: filepath.Join(p.dir, "postgres.log"), cred: p.cred,
		args: []string{"-D", p.data(), "-h", "127.0.0.1", "-p", strconv.Itoa(p.port), "-k", p.dir,
			"-c", "fsync=off", "-c", "full_page_writes=off", "-c", "shared_buffers=16MB", "-c", "max_connections=300",
			"-c", "log_min_messages=warning"},
	}
	if err := p.proc.start(); err != nil {
		return err
	}
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), httpTimeout)
		conn, err := pgx.Connect(ctx, p.DSN())
		if err == nil {
			conn.Close(ctx)
			cancel()
			return nil
		}
		cancel()
		if !p.proc.running() || time.Now().After(deadline) {
			p.proc.kill()
			return err
		}
		time.Sleep(pollInterval)
	}
}

func (p *Postgres) data() string { return filepath.Join(p.dir, "data") }

// pgEnv is the environment minus libpq's variables, so a developer's
// settings cannot change the server or the probes.
func pgEnv() []string {
	var env []string
	for _, kv := range serverEnv() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	return env
}

// Port is the server's TCP port on 127.0.0.1.
func (p *Postgres) Port() int { return p.port }

// Addr is host:port.
func (p *Postgres) Addr() string { return fmt.Sprintf("127.0.0.1:%d", p.port) }

// DSN is a connection URL for user postgres, database postgres, no TLS.
func (p *Postgres) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", p.port)
}

// Exec runs sql as the superuser, failing t on an error.
func (p *Postgres) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.DSN())
	if err != nil {
		t.Fatalf("testcluster: connect to postgres: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("testcluster: %s: %v", sql, err)
	}
}

// Stop stops the server with a fast shutdown (SIGINT: open sessions are
// ended; SIGTERM would wait for them).
func (p *Postgres) Stop() {
	_ = p.proc.signal(syscall.SIGINT, stopTimeout)
}

// Kill SIGKILLs the server and its backends, and waits until all are gone.
// Each backend runs in a session of its own (PostgreSQL calls setsid), so
// the process group holds only the postmaster: the backends are found by
// their parent, and would otherwise answer their clients for a moment
// longer, and keep the shared memory a restart needs.
func (p *Postgres) Kill() {
	kids := p.backends()
	p.proc.kill()
	for _, pid := range kids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	p.waitGone(kids)
}

// backends are the pids of the running postmaster's children.
func (p *Postgres) backends() []int {
	if !p.proc.running() {
		return nil
	}
	parent := p.proc.cmd.Process.Pid
	var kids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _ := procState(pid); ppid == parent {
			kids = append(kids, pid)
		}
	}
	return kids
}

// procState is a process's parent and state letter; 0 and "" once it is
// gone.
func procState(pid int) (int, string) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, ""
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid, f[0]
}

// waitGone waits until the pids are gone or zombies.
func (p *Postgres) waitGone(pids []int) {
	deadline := time.Now().Add(stopTimeout)
	for _, pid := range pids {
		for time.Now().Before(deadline) {
			if _, st := procState(pid); st == "" || st == "Z" {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// Restart starts a stopped or killed server again on the same port.
func (p *Postgres) Restart(t testing.TB) {
	t.Helper()
	if p.proc.running() {
		p.Stop()
	}
	_ = os.Remove(filepath.Join(p.data(), "postmaster.pid"))
	if err := p.run(); err != nil {
		t.Fatalf("testcluster: restart postgres: %v\n%s", err, p.proc.logTail())
	}
}

// StartStandby starts a hot standby of p (pg_basebackup, streaming
// replication), stopped when the test ends: a server that answers reads
// and refuses writes, pg_is_in_recovery() true.
func (p *Postgres) StartStandby(t testing.TB) *Postgres {
	t.Helper()
	dir, err := os.MkdirTemp("", "leaderrun-pgstandby-")
	if err != nil {
		t.Fatal(err)
	}
	s := &Postgres{bindir: p.bindir, dir: dir, cred: p.cred, tb: t}
	t.Cleanup(func() {
		if t.Failed() && s.proc != nil {
			logProcs(t, []*proc{s.proc})
		}
		s.close()
	})
	if s.cred != nil {
		if err := os.Chown(dir, pgNobody, pgNobody); err != nil {
			t.Fatal(err)
		}
	}
	bb := exec.Command(filepath.Join(p.bindir, "pg_basebackup"), "-D", s.data(), "-h", "127.0.0.1", "-p", strconv.Itoa(p.port),
		"-U", "postgres", "-R", "-X", "stream", "--no-sync", "--checkpoint=fast")
	bb.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGKILL}
	bb.Env = pgEnv()
	if out, err := bb.CombinedOutput(); err != nil {
		t.Fatalf("testcluster: pg_basebackup: %v: %s", err, out)
	}
	if err := s.serve(); err != nil {
		t.Fatalf("testcluster: standby: %v", err)
	}
	return s
}

func (p *Postgres) close() {
	if p.proc != nil {
		p.Kill()
	}
	os.RemoveAll(p.dir)
}
