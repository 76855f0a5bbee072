//go:build linux

// Package alerts tests the Prometheus rules and the Grafana dashboard under
// examples/prometheus: promtool accepts the rules and their unit tests pass,
// they name only series and labels leaderrun exports, and a real Prometheus
// scraping real leaderruns fires and resolves the alerts as it should.
package alerts

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

const (
	rulesFile     = "../../examples/prometheus/leaderrun-rules.yml"
	dashboardFile = "../../examples/prometheus/leaderrun-dashboard.json"
)

// binary is the leaderrun built once for this test process.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "leaderrun-alerts-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "leaderrun")
	build := exec.Command("go", "build", "-o", binary, "github.com/leaderrun/leaderrun")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build leaderrun:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// TestPromtool: the shipped rules pass `promtool check rules`, and their
// unit tests on synthetic series (testdata/rules_test.yml) pass.
func TestPromtool(t *testing.T) {
	promtool := testcluster.PrometheusBin(t, "promtool")
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", "testdata/rules_test.yml"}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// leaderrun is one leaderrun process started by a test, with its
// --http-addr fixed so that a restart keeps its scrape target.
type leaderrun struct {
	t    *testing.T
	name string
	args []string
	addr string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

func newLeaderrun(t *testing.T, name string, args ...string) *leaderrun {
	l := &leaderrun{
		t: t, name: name, args: args,
		addr: "127.0.0.1:" + strconv.Itoa(testcluster.FreePort(t)),
		log:  filepath.Join(t.TempDir(), name+".log"),
	}
	t.Cleanup(func() {
		l.signal(syscall.SIGKILL)
		if t.Failed() {
			b, _ := os.ReadFile(l.log)
			t.Logf("---- leaderrun %s log ----\n%s", name, b)
		}
	})
	return l
}

func (l *leaderrun) start() {
	l.t.Helper()
	f, err := os.OpenFile(l.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		l.t.Fatal(err)
	}
	defer f.Close()
	args := append([]string{"--http-addr", l.addr}, l.args...)
	l.cmd = exec.Command(binary, args...)
	l.cmd.Stdout, l.cmd.Stderr = f, f
	l.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := l.cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	l.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(l.cmd, l.done)
	testsupport.WaitFor(l.t, 10*time.Second, l.name+" serves /metrics", func() bool {
		if testsupport.IsClosed(l.done) {
			l.t.Fatalf("leaderrun %s exited at start", l.name)
		}
		return l.scrape() != ""
	})
}

// signal sends sig to leaderrun alone (not its child's group) and waits
// for it to exit.
func (l *leaderrun) signal(sig syscall.Signal) {
	if l.cmd == nil || testsupport.IsClosed(l.done) {
		return
	}
	_ = l.cmd.Process.Signal(sig)
	select {
	case <-l.done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-l.cmd.Process.Pid, syscall.SIGKILL)
		<-l.done
		l.t.Errorf("leaderrun %s did not exit within 15s of %v", l.name, sig)
	}
}

var scrapeClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// scrape returns the /metrics body, or "" when it does not answer.
func (l *leaderrun) scrape() string {
	resp, err := scrapeClient.Get("http://" + l.addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return ""
	}
	return string(b)
}

func (l *leaderrun) leads() bool {
	v, ok := testsupport.Metric(l.scrape(), "leaderrun_is_leader")
	return ok && v == 1
}
