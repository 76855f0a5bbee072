package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// notifyHost starts a host whose job speaks the notify protocol with
// systemd-notify: it says READY=1 unless NAME.noready exists, writes its
// NOTIFY_SOCKET to NAME.sock, and pings WATCHDOG=1 every 200ms from a
// loop that stops once NAME.hang exists, or sends WATCHDOG=trigger once
// NAME.trigger exists. The rest is hostScript's: pid, epoch, the overlap
// it saw at its start.
func notifyHost(t *testing.T, dir, name, other string, args []string) *host {
	t.Helper()
	if _, err := exec.LookPath("systemd-notify"); err != nil {
		t.Fatalf("needs systemd-notify (Debian package systemd): %v", err)
	}
	f := func(suffix string) string { return filepath.Join(dir, name+"."+suffix) }
	job := strings.Join([]string{
		"echo $NOTIFY_SOCKET > " + f("sock"),
		"[ -e " + f("noready") + " ] || systemd-notify --ready --status=serving",
		"(while [ ! -e " + f("hang") + " ]; do if [ -e " + f("trigger") + " ]; then systemd-notify WATCHDOG=trigger; else systemd-notify WATCHDOG=1; fi; sleep 0.2; done; sleep 1000) &",
		hostScript(dir, name, other),
	}, "\n")
	full := append(append([]string{"--id", name}, args...), "--", "sh", "-c", job)
	return &host{name: name, dir: dir, p: start(t, name, nil, full...)}
}

// notifyPair is pair for notifyHost; before, if set, runs before a starts.
func notifyPair(t *testing.T, args []string, before func(dir string)) (a, b *host) {
	t.Helper()
	dir := t.TempDir()
	if before != nil {
		before(dir)
	}
	a = notifyHost(t, dir, "a", "b", args)
	a.waitStarted(t, 30*time.Second)
	b = notifyHost(t, dir, "b", "a", args)
	waitFor(t, 10*time.Second, "b to campaign", func() bool { return strings.Contains(b.p.Output(), "waiting for the holder") })
	return a, b
}

// handedOver checks that b's job started after a's was stopped for why,
// never beside it, with a higher epoch, and that a stays out for a while.
func handedOver(t *testing.T, a, b *host, why string, within time.Duration) {
	t.Helper()
	b.waitStarted(t, within)
	b.noOverlap(t)
	if ea, eb := a.epoch(t), b.epoch(t); eb <= ea {
		t.Errorf("epoch %d after the handover, want > %d", eb, ea)
	}
	if !strings.Contains(a.p.Output(), why) {
		t.Errorf("a's log does not say %q:\n%s", why, a.p.Output())
	}
	if !strings.Contains(a.p.Output(), "the job hung here") {
		t.Errorf("a does not back off after its job hung:\n%s", a.p.Output())
	}
	if a.p.Exited() {
		t.Errorf("a exited; want it standing by:\n%s", a.p.Output())
	}
}

func notifyBackends(t *testing.T) map[string]func(key string, extra ...string) []string {
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	lockDir := t.TempDir()
	return map[string]func(string, ...string) []string{
		"local": func(key string, extra ...string) []string { return localArgs(lockDir, key, extra...) },
		"etcd":  func(key string, extra ...string) []string { return etcdArgs(eps, key, extra...) },
	}
}

// TestJobWatchdogHandsOver: a job that stops pinging is a zombie: its
// leaderrun stops it and hands the key over, and the standby's job starts
// within --job-watchdog + kill grace + one failover, never beside it.
func TestJobWatchdogHandsOver(t *testing.T) {
	for name, args := range notifyBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a, b := notifyPair(t, args(newKey("zombie"), "--job-watchdog", "1s"), nil)
			waitFor(t, 10*time.Second, "a's job ready", func() bool { return strings.Contains(a.p.Output(), "the job is ready") })
			// Pinging, a keeps the key well past its watchdog period.
			time.Sleep(2 * time.Second)
			if b.started() {
				t.Fatalf("b started while a's job pinged:\n%s", a.p.Output())
			}
			if err := os.WriteFile(a.file("hang"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			hung := time.Now()
			handedOver(t, a, b, "sent no WATCHDOG=1", 30*time.Second)
			t.Logf("job hung -> standby's job started: %v", b.stamp(t, "start").Sub(hung).Round(time.Millisecond))
		})
	}
}

// TestJobWatchdogTrigger: WATCHDOG=trigger hands over at once.
func TestJobWatchdogTrigger(t *testing.T) {
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	a, b := notifyPair(t, etcdArgs(eps, newKey("trigger"), "--job-watchdog", "30s"), nil)
	if err := os.WriteFile(a.file("trigger"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	handedOver(t, a, b, "WATCHDOG=trigger", 20*time.Second)
}

// TestReadyTimeoutHandsOver: a job that never says READY=1 is stopped at
// --ready-timeout and the standby leads.
func TestReadyTimeoutHandsOver(t *testing.T) {
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	a, b := notifyPair(t, etcdArgs(eps, newKey("unready"), "--ready-timeout", "2s"), func(dir string) {
		if err := os.WriteFile(filepath.Join(dir, "a.noready"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	})
	handedOver(t, a, b, "sent no READY=1", 30*time.Second)
	waitFor(t, 10*time.Second, "b's job ready", func() bool { return strings.Contains(b.p.Output(), "the job is ready") })
}

// TestNotifyFromOutsideTheJobIsIgnored: a process outside the job, of the
// same user, pings the job's socket on its behalf while the job hangs: it
// is not heard, and the zombie is still replaced.
func TestNotifyFromOutsideTheJobIsIgnored(t *testing.T) {
	dir := t.TempDir()
	a, b := notifyPair(t, localArgs(dir, newKey("outside"), "--job-watchdog", "1s"), nil)
	sock, err := os.ReadFile(a.file("sock"))
	if err != nil || strings.TrimSpace(string(sock)) == "" {
		t.Fatalf("the job's NOTIFY_SOCKET: %q %v", sock, err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			// Sent from this test's process (systemd-notify run by root
			// names its parent), in no job.
			cmd := exec.Command("systemd-notify", "WATCHDOG=1")
			cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+strings.TrimSpace(string(sock)))
			_ = cmd.Run()
		}
	}()
	if err := os.WriteFile(a.file("hang"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	handedOver(t, a, b, "sent no WATCHDOG=1", 30*time.Second)
	if !strings.Contains(a.p.Output(), "outside the job was ignored") {
		t.Errorf("a does not say it ignored a process outside the job:\n%s", a.p.Output())
	}
}

// TestJobReadinessAndStatusServed: what the job says reaches /status
// (job_ready_at, job_status) and /metrics (leaderrun_job_ready), with no
// rule set; a job that never speaks the protocol runs as before.
func TestJobReadinessAndStatusServed(t *testing.T) {
	dir := t.TempDir()
	key := newKey("said")
	args := localArgs(dir, key, "--http-addr", "127.0.0.1:0")
	p := start(t, "a", nil, withCommand(args, `sleep 0.5; systemd-notify --ready --status="copying 3 of 7"; exec sleep 1000`)...)
	addr := httpAddr(t, p)
	waitMetrics(t, addr, 20*time.Second, map[string]float64{"leaderrun_job_ready": 1})
	_, status := testsupport.HTTPGet(t, addr, "/status")
	if !strings.Contains(status, `"job_status": "copying 3 of 7"`) || !strings.Contains(status, `"job_ready_at"`) {
		t.Errorf("/status lacks what the job said:\n%s", status)
	}
	// The term's history record says it too, for status and history from
	// any host.
	query := []string{"--backend", "local", "--lock-dir", dir, key}
	var out string
	waitFor(t, 20*time.Second, "status to show the job's status", func() bool {
		_, out, _, _ = runOnce(t, nil, append([]string{"status"}, query...)...)
		return strings.Contains(out, "ready since") && strings.Contains(out, "copying 3 of 7")
	})
	if _, hist, _, _ := runOnce(t, nil, append([]string{"history"}, query...)...); !strings.Contains(hist, "running: copying 3 of 7") {
		t.Errorf("history does not show the running job's status:\n%s", hist)
	}
}

// TestNotifyExamplesRun: the shell and Go jobs of examples/notify keep a
// 1s --job-watchdog for several periods and say they are ready.
func TestNotifyExamplesRun(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "notify")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/leaderrun/leaderrun/examples/notify").CombinedOutput(); err != nil {
		t.Fatalf("build examples/notify: %v\n%s", err, out)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for name, job := range map[string]string{"shell": filepath.Join(root, "examples/notify/job.sh"), "go": bin} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			args := append(localArgs(dir, newKey("example"), "--job-watchdog", "1s"), "--", job)
			p := start(t, name, nil, args...)
			waitFor(t, 20*time.Second, "the job ready", func() bool { return strings.Contains(p.Output(), "the job is ready") })
			time.Sleep(4 * time.Second)
			if out := p.Output(); strings.Contains(out, "hangs") || p.Exited() {
				t.Fatalf("the example missed its watchdog:\n%s", out)
			}
		})
	}
}

// TestJobWatchdogWithHolders: with --holders 2 a hung job's slot goes to
// the waiting candidate, and the hung host backs off before it races the
// slots again (its count carries over from one slot's term to the next).
func TestJobWatchdogWithHolders(t *testing.T) {
	dir := t.TempDir()
	key := newKey("zombie-slots")
	job := func(name string) string {
		hang := filepath.Join(dir, name+".hang")
		return "touch " + filepath.Join(dir, name+".started") + "\n" +
			"while [ ! -e " + hang + " ]; do systemd-notify WATCHDOG=1; sleep 0.2; done; exec sleep 1000"
	}
	started := func(name string) bool {
		_, err := os.Stat(filepath.Join(dir, name+".started"))
		return err == nil
	}
	procs := map[string]*Proc{}
	for _, name := range []string{"a", "b"} {
		procs[name] = start(t, name, nil, withCommand(localArgs(dir, key, "--holders", "2", "--id", name, "--job-watchdog", "1s"), job(name))...)
	}
	waitFor(t, 20*time.Second, "a and b to lead", func() bool { return started("a") && started("b") })
	procs["c"] = start(t, "c", nil, withCommand(localArgs(dir, key, "--holders", "2", "--id", "c", "--job-watchdog", "1s"), job("c"))...)
	time.Sleep(2 * time.Second)
	if started("c") {
		t.Fatal("c started while both slots' jobs pinged")
	}
	if err := os.WriteFile(filepath.Join(dir, "a.hang"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "c to take a's slot", func() bool { return started("c") })
	a := procs["a"]
	waitFor(t, 10*time.Second, "a to back off", func() bool { return strings.Contains(a.Output(), "the job hung here (1 term)") })
	if !strings.Contains(a.Output(), "the job hangs") || a.Exited() {
		t.Fatalf("a:\n%s", a.Output())
	}
}
