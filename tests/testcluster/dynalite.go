//go:build linux

package testcluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Dynalite is a DynamoDB-compatible server on Node.js and LevelDB (npm
// package dynalite, pinned by scripts/install-deps.sh), in memory, or in
// LevelDB files under its folder (StartDynaliteOnDisk). It
// speaks DynamoDB's API and checks conditions and consistent reads as the
// service does; it is not AWS: no throttling, no IAM (any signature is
// accepted), no instance credentials, no TransactWriteItems.
const (
	dynaliteHint = "run scripts/install-deps.sh (npm package dynalite, into bin/dynalite)"
	// DynaliteEnv points at a dynalite executable, overriding the search.
	DynaliteEnv = "LEADERRUN_DYNALITE"
)

// Dynalite is one dynalite server started by StartDynalite or
// SharedDynalite, on 127.0.0.1.
type Dynalite struct {
	dir  string
	port int
	proc *proc
	bin  string
	disk bool
}

// DynaliteBin returns the dynalite executable: $LEADERRUN_DYNALITE, else
// bin/dynalite/node_modules/.bin/dynalite under the repository (or under
// $LEADERRUN_SERVER_BIN), else dynalite on PATH. A missing one skips the
// test with the install hint, or fails it under CI=true, as Bin does.
func DynaliteBin(t testing.TB) string {
	t.Helper()
	path, err := dynaliteBin()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("testcluster: dynalite unavailable: %v; %s", err, dynaliteHint)
		}
		t.Skipf("testcluster: dynalite unavailable: %v; %s", err, dynaliteHint)
	}
	return path
}

func dynaliteBin() (string, error) {
	var tried []string
	if p := os.Getenv(DynaliteEnv); p != "" {
		tried = append(tried, p)
	}
	rel := filepath.Join("dynalite", "node_modules", ".bin", "dynalite")
	if dir := os.Getenv(BinEnv); dir != "" {
		tried = append(tried, filepath.Join(dir, rel))
	}
	if root, err := repoRoot(); err == nil {
		tried = append(tried, filepath.Join(root, "bin", rel))
	}
	for _, p := range tried {
		if info, err := os.Stat(p); err == nil && !info.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath("dynalite"); err == nil {
		return p, nil
	}
	if _, err := exec.LookPath("node"); err != nil {
		return "", errors.New("node is not installed")
	}
	return "", fmt.Errorf("no dynalite in %v or on PATH", tried)
}

// StartDynalite starts a server of its own for the test, stopped when the
// test ends (its log printed if the test failed).
func StartDynalite(t testing.TB) *Dynalite { t.Helper(); return startOwnDynalite(t, false) }

// StartDynaliteOnDisk is StartDynalite with the tables in LevelDB files
// (dynalite's --path) instead of memory: a server killed and started
// again by Restart serves the items it had acknowledged.
func StartDynaliteOnDisk(t testing.TB) *Dynalite { t.Helper(); return startOwnDynalite(t, true) }

func startOwnDynalite(t testing.TB, disk bool) *Dynalite {
	t.Helper()
	d, err := startDynalite(DynaliteBin(t), disk)
	if err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logProcs(t, []*proc{d.proc})
		}
		d.close()
	})
	return d
}

var sharedDyn sharedServer[*Dynalite]

// SharedDynalite is one server for the whole test binary (one per test
// package), started by the first test that asks; tests keep apart by
// their own keys or tables. StopSharedDynalite, from TestMain, stops it;
// if the binary dies first the kernel kills it (PDEATHSIG).
func SharedDynalite(t testing.TB) *Dynalite {
	t.Helper()
	bin := DynaliteBin(t)
	return sharedDyn.get(t, func() (*Dynalite, error) { return startDynalite(bin, false) })
}

// StopSharedDynalite stops the server SharedDynalite started, if any.
func StopSharedDynalite() { sharedDyn.stop() }

func startDynalite(bin string, disk bool) (*Dynalite, error) {
	dir, err := os.MkdirTemp("", "leaderrun-dynalite-")
	if err != nil {
		return nil, err
	}
	d := &Dynalite{dir: dir, bin: bin, disk: disk}
	if err := os.WriteFile(filepath.Join(dir, "keepup.js"), []byte(keepUp), 0o644); err != nil {
		d.close()
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(1, false)
		if err != nil {
			d.close()
			return nil, err
		}
		d.port = ports[0]
		err = d.run()
		if err == nil {
			return d, nil
		}
		conflict := d.proc.portConflict()
		d.proc.kill()
		if !conflict || attempt == 3 {
			tail := d.proc.logTail()
			d.close()
			return nil, fmt.Errorf("dynalite did not start: %v\n%s", err, tail)
		}
	}
}

// keepUp is loaded into dynalite's Node.js before it starts: dynalite
// rethrows a request's error from its handler, so a client whose
// connection is reset mid-request (a proxy that refuses a host, a killed
// leaderrun) would kill the server. That error is only the one request's;
// the server carries on, and any other uncaught error still ends it.
const keepUp = `process.on('uncaughtException', function (err) {
  if (err && err.code === 'ECONNRESET') {
    console.error('testcluster: a client reset its connection mid-request: ' + err.message)
    return
  }
  console.error((err && err.stack) || err)
  process.exit(1)
})
`

// run starts the server on d.port and waits until it answers.
func (d *Dynalite) run() error {
	// Tables become ACTIVE at once: the tests wait for nothing.
	args := []string{"--host", "127.0.0.1", "--port", strconv.Itoa(d.port), "--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0"}
	if d.disk {
		args = append(args, "--path", filepath.Join(d.dir, "data"))
	}
	d.proc = &proc{name: "dynalite", bin: d.bin, logPath: filepath.Join(d.dir, "dynalite.log"), args: args,
		env: []string{"NODE_OPTIONS=--require " + filepath.Join(d.dir, "keepup.js")}}
	if err := d.proc.start(); err != nil {
		return err
	}
	return poll(startTimeout, func() error {
		if !d.proc.running() {
			return permanentError{fmt.Errorf("dynalite exited: %v", d.proc.exitErr())}
		}
		return d.ping()
	})
}

// ping makes one ListTables call.
func (d *Dynalite) ping() error {
	_, err := d.call("ListTables", `{}`)
	return err
}

// call makes one DynamoDB API call, signed with nothing dynalite checks,
// and returns the answer's body.
func (d *Dynalite) call(op, body string) ([]byte, error) {
	req, err := http.NewRequest(http.MethodPost, d.Endpoint(), strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810."+op)
	req.Header.Set("X-Amz-Date", time.Now().UTC().Format("20060102T150405Z"))
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=00")
	c := http.Client{Timeout: httpTimeout}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", op, resp.Status, bytes.TrimSpace(out))
	}
	return out, nil
}

// Call makes one DynamoDB API call (op as "DeleteItem", body its JSON
// request) and returns the answer's body.
func (d *Dynalite) Call(op, body string) ([]byte, error) { return d.call(op, body) }

// Endpoint is the server's URL, for --dynamodb-endpoint.
func (d *Dynalite) Endpoint() string { return fmt.Sprintf("http://127.0.0.1:%d", d.port) }

// Addr is host:port.
func (d *Dynalite) Addr() string { return fmt.Sprintf("127.0.0.1:%d", d.port) }

// Env is the environment a client of the server needs besides the
// endpoint: fake credentials (dynalite checks none) and a region, so that
// no real AWS profile, credentials or instance metadata is ever used.
func (d *Dynalite) Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=leaderrun-test", "AWS_SECRET_ACCESS_KEY=leaderrun-test", "AWS_SESSION_TOKEN=",
		"AWS_REGION=us-east-1", "AWS_PROFILE=", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null",
		"AWS_EC2_METADATA_DISABLED=true"}
}

// SetEnv sets Env for the test's own process (t.Setenv: not with
// t.Parallel).
func (d *Dynalite) SetEnv(t testing.TB) {
	t.Helper()
	for _, kv := range d.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// Kill SIGKILLs the server: tables in memory are gone with it; those on
// disk (StartDynaliteOnDisk) stay for Restart.
func (d *Dynalite) Kill() { d.proc.kill() }

// Restart stops the server if it runs and starts it again on its port,
// with its data if it keeps them on disk.
func (d *Dynalite) Restart(t testing.TB) {
	t.Helper()
	if d.proc.running() {
		d.proc.kill()
	}
	if err := d.run(); err != nil {
		t.Fatalf("testcluster: restart dynalite: %v\n%s", err, d.proc.logTail())
	}
}

func (d *Dynalite) close() {
	if d.proc != nil {
		killAll([]*proc{d.proc})
	}
	os.RemoveAll(d.dir)
}
