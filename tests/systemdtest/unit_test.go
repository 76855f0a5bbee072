package systemdtest

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// jobScript is the command the units run: it records its start (with the
// epoch it was handed) and the stop signal it got in /var/tmp/NAME.log.
const jobScript = `#!/bin/sh
log=/var/tmp/$1.log
echo "start $$ epoch=$LEADER_EPOCH" >>"$log"
trap 'echo "term $$" >>"$log"; exit 143' TERM
while :; do sleep 0.2; done
`

// backend is one way of configuring the units: the settings every instance
// on the machine shares.
type backend struct {
	name  string
	setup func(t *testing.T) map[string]string
}

var backends = []backend{
	{"local", func(*testing.T) map[string]string {
		return map[string]string{"LEADERRUN_BACKEND": "local"}
	}},
	{"etcd", func(t *testing.T) map[string]string {
		// Outside the namespace, on the loopback the machine shares.
		e := testcluster.StartEtcd(t, 1)
		return map[string]string{"LEADERRUN_BACKEND": "etcd", "ETCDCTL_ENDPOINTS": strings.Join(e.Endpoints(), ",")}
	}},
}

// leaderMachine boots systemd and installs the freshly built package and
// the job script.
func leaderMachine(t *testing.T) *Machine {
	t.Helper()
	deb := Package(t)
	m := Boot(t)
	m.Install(deb)
	m.WriteFile("/usr/local/bin/job", jobScript, 0o755)
	return m
}

// unitFile is the installed template unit.
func (m *Machine) unitFile() string { return m.ReadFile("/lib/systemd/system/leaderrun@.service") }

// sharedEnvFile is true when the installed unit reads the settings shared
// by all instances from /etc/leaderrun/leaderrun.env.
func (m *Machine) sharedEnvFile() bool {
	return sharedEnvUnit.MatchString(m.unitFile())
}

// Configure writes the settings of leaderrun@KEY: shared ones into
// /etc/leaderrun/leaderrun.env when the package reads that file, else
// (today's single file per instance) together with the instance's own into
// /etc/leaderrun/KEY.env.
func (m *Machine) Configure(key string, shared, own map[string]string) {
	m.t.Helper()
	if own == nil {
		own = map[string]string{}
	}
	if _, ok := own["LEADERRUN_COMMAND"]; !ok {
		own["LEADERRUN_COMMAND"] = "/usr/local/bin/job " + key
	}
	if m.sharedEnvFile() {
		m.WriteFile("/etc/leaderrun/leaderrun.env", envFile(shared), 0o600)
	} else {
		merged := map[string]string{}
		for k, v := range shared {
			merged[k] = v
		}
		for k, v := range own {
			merged[k] = v
		}
		own = merged
	}
	m.WriteFile("/etc/leaderrun/"+key+".env", envFile(own), 0o600)
}

func envFile(vars map[string]string) string {
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, vars[k])
	}
	return b.String()
}

var statusRE = regexp.MustCompile(`^leader of (\S+), epoch (\d+), child pid (\d+)$`)

// leading waits until leaderrun@KEY is active and its STATUS= says it leads,
// and returns the epoch and the child's PID inside the machine.
func (m *Machine) leading(key string, timeout time.Duration) (epoch uint64, child int) {
	m.t.Helper()
	unit := "leaderrun@" + key
	var status string
	m.Eventually(unit+" active and leading", timeout, func() bool {
		status = m.Show(unit, "StatusText")
		sm := statusRE.FindStringSubmatch(status)
		if m.Show(unit, "ActiveState") != "active" || sm == nil || sm[1] != key {
			return false
		}
		epoch, _ = strconv.ParseUint(sm[2], 10, 64)
		child, _ = strconv.Atoi(sm[3])
		return true
	})
	return epoch, child
}

// start starts leaderrun@KEY and waits until it leads.
func (m *Machine) start(key string) (epoch uint64, child int) {
	m.t.Helper()
	m.MustRun("systemctl", "start", "leaderrun@"+key)
	return m.leading(key, 30*time.Second)
}

// status runs `leaderrun status --key KEY --json` inside the machine with
// the shared settings.
func (m *Machine) status(key string, shared map[string]string) string {
	m.t.Helper()
	args := []string{"env"}
	for k, v := range shared {
		args = append(args, k+"="+v)
	}
	return m.MustRun(append(args, "leaderrun", "status", "--key", key, "--json")...)
}

// timeoutStop is the unit's TimeoutStopSec.
func (m *Machine) timeoutStop(unit string) time.Duration {
	us, err := strconv.ParseInt(m.Show(unit, "TimeoutStopUSec"), 10, 64)
	if err != nil {
		// systemctl show prints "30s" or "1min 30s" unless asked for µs.
		v := strings.ReplaceAll(strings.ReplaceAll(m.Show(unit, "TimeoutStopUSec"), "min", "m"), " ", "")
		d, err := time.ParseDuration(v)
		if err != nil {
			m.t.Fatalf("TimeoutStopUSec %q: %v", m.Show(unit, "TimeoutStopUSec"), err)
		}
		return d
	}
	return time.Duration(us) * time.Microsecond
}

// TestStartAndStop: a started instance is active with READY and a STATUS=
// naming its epoch, and its command runs with that epoch; `systemctl stop`
// gives the command the stop signal, leaderrun releases the key and exits,
// and the unit ends inactive (not failed) within TimeoutStopSec, while a
// second instance on another key runs on untouched.
func TestStartAndStop(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			shared := b.setup(t)
			m := leaderMachine(t)
			m.Configure("billing", shared, nil)
			m.Configure("reports", shared, nil)

			epoch, child := m.start("billing")
			if epoch < 1 {
				t.Fatalf("epoch %d", epoch)
			}
			if log := m.ReadFile("/var/tmp/billing.log"); !strings.Contains(log, fmt.Sprintf("start %d epoch=%d\n", child, epoch)) {
				t.Fatalf("the command did not start with LEADER_EPOCH=%d as child %d:\n%s", epoch, child, log)
			}
			// Type=notify: "active" is only reached through READY=1.
			if got := m.Show("leaderrun@billing", "Type"); got != "notify" {
				t.Fatalf("Type=%s", got)
			}
			if st := m.status("billing", shared); !strings.Contains(st, fmt.Sprintf(`"epoch": %d`, epoch)) && !strings.Contains(st, fmt.Sprintf(`"epoch":%d`, epoch)) {
				t.Fatalf("leaderrun status does not show epoch %d: %s", epoch, st)
			}
			_, otherChild := m.start("reports")
			otherMain := m.Show("leaderrun@reports", "MainPID")

			begin := time.Now()
			out, err := m.Run("systemctl", "stop", "leaderrun@billing")
			took := time.Since(begin)
			if err != nil {
				t.Fatalf("systemctl stop: %v\n%s", err, out)
			}
			if limit := m.timeoutStop("leaderrun@billing"); took >= limit {
				t.Errorf("stop took %v, TimeoutStopSec is %v", took, limit)
			}
			t.Logf("systemctl stop took %v", took.Round(time.Millisecond))
			if got := m.Show("leaderrun@billing", "ActiveState"); got != "inactive" {
				t.Errorf("after stop: ActiveState=%s Result=%s, want inactive", got, m.Show("leaderrun@billing", "Result"))
			}
			if log := m.ReadFile("/var/tmp/billing.log"); !strings.Contains(log, fmt.Sprintf("term %d\n", child)) {
				t.Errorf("the command never got the stop signal:\n%s", log)
			}
			if j := m.Journal("leaderrun@billing"); !strings.Contains(j, "released") {
				t.Errorf("no release logged:\n%s", j)
			}
			// Released: nobody leads billing any more.
			if st := m.status("billing", shared); !regexp.MustCompile(`"leader":\s*null`).MatchString(st) {
				t.Errorf("billing still held after stop: %s", st)
			}

			if got := m.Show("leaderrun@reports", "ActiveState"); got != "active" {
				t.Errorf("reports: ActiveState=%s after billing stopped", got)
			}
			if got := m.Show("leaderrun@reports", "MainPID"); got != otherMain {
				t.Errorf("reports: MainPID %s, was %s", got, otherMain)
			}
			if _, c := m.leading("reports", time.Second); c != otherChild {
				t.Errorf("reports: child %d, was %d", c, otherChild)
			}
			if log := m.ReadFile("/var/tmp/reports.log"); strings.Contains(log, "term") {
				t.Errorf("reports' command got a stop signal:\n%s", log)
			}
		})
	}
}
