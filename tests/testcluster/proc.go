//go:build linux

package testcluster

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// How long the helpers wait. The machine may be small and shared with other
// builds and tests, so these are generous: a healthy run never gets close,
// and they only bound how long a broken run hangs.
const (
	startTimeout = 60 * time.Second // a fresh cluster elects a leader
	stopTimeout  = 15 * time.Second // SIGTERM before we fall back to SIGKILL
	pollInterval = 50 * time.Millisecond
	httpTimeout  = 2 * time.Second // one readiness probe
	logTailBytes = 16 << 10        // per log file, printed on failure
)

// proc is one server process and its log file. It is only used from the
// test's goroutine, except for the waiter goroutine which owns waitErr until
// it closes done.
type proc struct {
	name    string // for messages, e.g. "etcd member 1"
	bin     string
	args    []string
	logPath string
	// cred, when set, runs the process as that user (PostgreSQL refuses
	// to run as root).
	cred *syscall.Credential
	// env is added to serverEnv.
	env []string

	cmd     *exec.Cmd
	done    chan struct{} // closed once the process has been reaped
	waitErr error         // valid after done is closed
	stopped bool          // the test stopped it on purpose
}

// start launches the process with its output appended to its log file.
//
// Setpgid puts the server in a process group of its own, so signals reach
// anything it might spawn. Pdeathsig makes the kernel SIGKILL it if the test
// binary dies without running cleanups (e.g. `go test -timeout` or a crash).
// Pdeathsig fires when the forking OS thread exits; Go only retires threads
// locked with runtime.LockOSThread, which this package never does.
func (p *proc) start() error {
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close() // the child keeps its own descriptor
	fmt.Fprintf(f, "==== testcluster %s: %s %s\n", time.Now().Format(time.RFC3339Nano), p.bin, strings.Join(p.args, " "))

	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.Env = append(serverEnv(), p.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: p.cred}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.cmd = cmd
	p.done = make(chan struct{})
	p.stopped = false
	go func() {
		err := cmd.Wait()
		p.waitErr = err
		close(p.done)
	}()
	return nil
}

// serverEnv is the test's environment minus the variables etcd and Consul
// read as configuration (etcd maps every ETCD_* variable onto a flag), so a
// developer's shell settings cannot change the cluster under test.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "ETCD_") || strings.HasPrefix(kv, "ETCDCTL_") || strings.HasPrefix(kv, "CONSUL_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// running reports whether the process was started and has not exited.
func (p *proc) running() bool { return p.done != nil && !testsupport.IsClosed(p.done) }

// exitErr describes an exit that happened although nobody asked for it,
// or returns nil while the process runs or after a deliberate stop.
func (p *proc) exitErr() error {
	if p.done == nil || p.stopped || p.running() {
		return nil
	}
	return fmt.Errorf("%s exited: %v (log %s)", p.name, p.waitErr, p.logPath)
}

// signal sends sig to the process group and waits up to timeout for the
// process to exit; if it is still there, it is SIGKILLed and waited for.
// It is a no-op for a process that is not running.
func (p *proc) signal(sig syscall.Signal, timeout time.Duration) error {
	p.stopped = true
	if !p.running() {
		return nil
	}
	// The negative pid addresses the whole group. ESRCH means it is already
	// gone, which is fine: the waiter will close done.
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %s: %w", p.name, err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
	return fmt.Errorf("%s did not exit within %v of %v; killed", p.name, timeout, sig)
}

// kill SIGKILLs the process group and waits for the process to be reaped.
func (p *proc) kill() {
	p.stopped = true
	if !p.running() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// logTail returns the end of the process's log file.
func (p *proc) logTail() string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	defer f.Close()
	if info, err := f.Stat(); err == nil && info.Size() > logTailBytes {
		_, _ = f.Seek(-logTailBytes, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// portConflict reports whether the process died because one of its ports
// was taken between our probe and its bind; starting over with new ports is
// then the right response.
func (p *proc) portConflict() bool {
	return !p.running() && p.done != nil && strings.Contains(p.logTail(), "address already in use")
}

// logProcs prints the log tails of procs through t.Logf.
func logProcs(t testing.TB, procs []*proc) {
	t.Helper()
	for _, p := range procs {
		t.Logf("---- %s log (%s), last %d bytes ----\n%s", p.name, p.logPath, logTailBytes, p.logTail())
	}
}

// killAll SIGKILLs every process and waits for each; used by cleanups, where
// a graceful stop would only cost time since the data is thrown away.
func killAll(procs []*proc) {
	for _, p := range procs {
		p.stopped = true
		if p.running() {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		}
	}
	for _, p := range procs {
		if p.done != nil {
			<-p.done
		}
	}
}

// Ports are handed out at most once per test binary, so two clusters in one
// process never collide with each other.
var (
	portMu    sync.Mutex
	usedPorts = map[int]bool{}
)

// freePorts returns n distinct loopback ports that are free right now, for
// TCP and (when udp is set, as Serf needs) UDP too.
//
// Ports come from below the kernel's ephemeral range: the kernel picks
// outgoing connections' local ports from that range, so a port chosen there
// could be taken by any client socket between our probe and the server's
// bind. Another process can still grab a port in that window; callers retry
// the start on "address already in use".
func freePorts(n int, udp bool) ([]int, error) {
	portMu.Lock()
	defer portMu.Unlock()
	lo, hi := 10000, ephemeralLow()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 10000 {
			return nil, errors.New("no free loopback port found")
		}
		port := lo + rand.IntN(hi-lo)
		if usedPorts[port] || !portFree(port, udp) {
			continue
		}
		usedPorts[port] = true
		ports = append(ports, port)
	}
	return ports, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range, falling
// back to the Linux default when it cannot be read or leaves too little room.
func ephemeralLow() int {
	const fallback = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return fallback
	}
	var low int
	if _, err := fmt.Sscan(string(b), &low); err != nil || low < 12000 {
		return fallback
	}
	return low
}

// portFree probes a port by binding it on 127.0.0.1.
func portFree(port int, udp bool) bool {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	l.Close()
	if udp {
		c, err := net.ListenPacket("udp", addr)
		if err != nil {
			return false
		}
		c.Close()
	}
	return true
}

// poll calls check every pollInterval until it returns nil or timeout
// passes, and returns check's last error then. A check can return a
// permanent error to stop early.
func poll(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		var perm permanentError
		if errors.As(err, &perm) {
			return perm.err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", timeout, err)
		}
		<-ticker.C
	}
}

// permanentError makes poll give up at once, e.g. when a server exited.
type permanentError struct{ err error }

func (p permanentError) Error() string { return p.err.Error() }

// exited returns a permanent error if any of procs that should be running
// has exited.
func exited(procs []*proc) error {
	for _, p := range procs {
		if err := p.exitErr(); err != nil {
			return permanentError{err}
		}
	}
	return nil
}
