//go:build linux

package chaos

import (
	"context"
	"flag"
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leaderrun/leaderrun/tests/fence"
)

// The control faults: the operator's step-down, step-down --to, pause and
// resume, and priority changes (DESIGN §1.16), mixed into the plan with
// the other faults and, at random, struck together with one of them. The
// operator's commands reach the servers directly, not through a host's
// proxies, as from a machine of its own.

var flagControl = flag.Int("chaos.control", 0,
	"weight of the control faults (step-down, step-down-to, pause, priority) in a long run: each comes that many times "+
		"as often as another fault type; above 0 every host also runs with a random --priority (0-2) and --preempt-after "+
		preemptAfter.String()+"; 0 leaves them out (the short run has its own)")

// preemptAfter is the hosts' --preempt-after when the control faults run.
const preemptAfter = 2 * time.Second

// controlFaults join the fault list; plan takes them only with
// -chaos.control (and the short plan names its own).
var controlFaults = []fault{
	{name: "step-down", control: true, inject: stepDown,
		doc: "`leaderrun step-down`; at random alone, or with the leader's leaderrun frozen or (not local) its proxies cut a moment after the request, until another host leads"},
	{name: "step-down-to", control: true, inject: stepDownTo,
		doc: "`leaderrun step-down --to ID` of a random standby: alive, frozen (SIGSTOP) for the command's whole --timeout, or killed with `kill -9` and started again at once; no other host's child may start before the chosen one's or the timeout"},
	{name: "pause", control: true, inject: pauseResume,
		doc: "`leaderrun pause`, held 1s + a random part of the TTL, then `leaderrun resume`; at random alone, with a standby frozen across the pause's start and woken during it, or with a host killed and started again during it; no write may be accepted, and no child start, between the pause's return and the resume"},
	{name: "priority", control: true, inject: priorityChange,
		doc: "a random host (the leader included) stopped with SIGTERM and started again with another random `--priority` (0-3); the hosts run with `--preempt-after 2s`"},
}

func init() { faults = append(faults, controlFaults...) }

// ctlCount counts one control command's outcomes within one fault and way.
type ctlCount struct {
	runs, ok, timedOut, other int
	took                      Durations
	// chosen: step-down-to with exit 0 whose chosen candidate led next;
	// priority: a host restarted above every other's priority that led
	// within the wait.
	chosen, above, aboveLed int
	// raced: exit 125 because the leader had changed or gone when the
	// command read it.
	raced int
	// held: pause, from its return to the resume, where it returned 0.
	held Durations
}

// controlling reports whether the hosts run with priorities.
func controlling() bool { return *flagControl > 0 }

// controlTimeout is the --timeout of step-down and pause: enough for a
// standby to take over once the holder released, on Consul too.
func (w *world) controlTimeout() time.Duration { return w.tm.TTL + 5*time.Second }

// ctlArgs are the operator's backend options: every server's own address.
func (w *world) ctlArgs() []string {
	var addrs []string
	for i := 0; i < w.cl.Servers(); i++ {
		addrs = append(addrs, w.cl.ServerAddr(i))
	}
	return append(w.cl.LeaderrunArgs(addrs), "--key", key)
}

// ctlResult is how a control command ended.
type ctlResult struct {
	code int
	out  string
	took time.Duration
	done fence.Mono // when it returned
}

// control runs `leaderrun ARGS` with the operator's backend options and
// counts its outcome under name/how.
func (w *world) control(name, how string, timeout time.Duration, args ...string) ctlResult {
	a := append(append([]string{}, args...), "--timeout", timeout.String())
	a = append(a, w.ctlArgs()...)
	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, w.bins.Leaderrun, a...)
	cmd.Env = append(cleanEnv(), HostEnv(w.cl)...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	r := ctlResult{code: cmd.ProcessState.ExitCode(), out: strings.TrimSpace(string(out)), took: time.Since(start), done: fence.Now()}
	if err != nil && cmd.ProcessState == nil {
		r.code = -1
	}
	c := w.ctlCount(name, how)
	c.runs++
	c.took = append(c.took, r.took)
	switch r.code {
	case 0:
		c.ok++
	case 1:
		c.timedOut++
	case 125:
		// The leader changed under the command (a preemption, a fault
		// striking with it): a fair refusal, counted.
		if strings.Contains(r.out, "already leads") || strings.Contains(r.out, "nobody leads") {
			c.raced++
			break
		}
		fallthrough
	default:
		c.other++
		w.t.Errorf("%s (%s): leaderrun %s exited %d after %v, want 0 or 1:\n%s", name, how, strings.Join(args, " "), r.code, r.took.Round(time.Millisecond), r.out)
	}
	w.t.Logf("%s (%s): leaderrun %s: exit %d after %v: %s", name, how, strings.Join(args, " "), r.code, r.took.Round(time.Millisecond), oneLine(r.out))
	return r
}

// ctlCount is the counter of fault name's command in way how.
func (w *world) ctlCount(name, how string) *ctlCount {
	k := name + "\x00" + how
	c := w.ctl[k]
	if c == nil {
		c = &ctlCount{}
		w.ctl[k] = c
	}
	return c
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " | ") }

// standbys are the hosts other than h.
func (w *world) standbys(h *host) []*host {
	var out []*host
	for _, o := range w.hosts {
		if o != h {
			out = append(out, o)
		}
	}
	return out
}

// stepDown asks the leader to step down, alone or while the leader's
// leaderrun is frozen or cut off a moment later: the request races the
// fault. Either way a higher epoch leads next, on another host.
func stepDown(w *world, h *host, in fence.Instance) outcome {
	ways := []string{"alone", "alone", "leader frozen"}
	if w.cl.Name() != "local" {
		ways = append(ways, "leader cut off")
	}
	how := ways[w.rng.IntN(len(ways))]
	delay := time.Duration(w.rng.Int64N(int64(500 * time.Millisecond)))
	at := fence.Now()
	done := make(chan ctlResult, 1)
	go func() { done <- w.control("step-down", how, w.controlTimeout(), "step-down") }()
	o := outcome{at: at, how: how}
	switch how {
	case "leader frozen":
		time.Sleep(delay)
		o = freezeLeaderrun(w, h, in)
	case "leader cut off":
		time.Sleep(delay)
		o = partition(w, h, in)
	}
	o.at, o.how = at, how
	r := <-done
	if r.code == 0 {
		w.checkNewTerm("step-down", in, at, r)
	}
	return o
}

// checkNewTerm checks what a step-down that exited 0 printed: another
// host's id and an epoch above the old one.
func (w *world) checkNewTerm(name string, old fence.Instance, at fence.Mono, r ctlResult) {
	var id, k, asked string
	var epoch, from uint64
	for _, l := range strings.Split(r.out, "\n") {
		if a, ok := strings.CutPrefix(l, "leaderrun: asked "); ok {
			_, _ = fmt.Sscanf(a, "%s (epoch %d)", &asked, &from)
		} else if !strings.HasPrefix(l, "leaderrun:") {
			_, _ = fmt.Sscanf(l, "%s leads %s with epoch %d", &id, &k, &epoch)
		}
	}
	if asked == "" {
		asked, from = old.Writer, old.Epoch
	}
	if id == "" {
		w.t.Errorf("%s: exit 0 but no new term in its output %q", name, r.out)
		return
	}
	if id == asked || epoch <= from || epoch <= old.Epoch {
		w.t.Errorf("%s: %s (epoch %d) was asked to step down, the command says %s leads with epoch %d", name, asked, from, id, epoch)
	}
}

// stepDownTo hands over to a random standby, alive, frozen for the whole
// command or killed and started again at once. Until the command's
// timeout, no other host's child may start: the first child of a later
// leadership is the chosen one's.
func stepDownTo(w *world, h *host, in fence.Instance) outcome {
	sb := w.standbys(h)
	to := sb[w.rng.IntN(len(sb))]
	how := []string{"alive", "alive", "frozen", "killed and restarted"}[w.rng.IntN(4)]
	timeout := w.controlTimeout()
	switch how {
	case "frozen":
		to.frozen = true
		_ = to.proc.Signal(syscall.SIGSTOP)
	case "killed and restarted":
		_ = to.proc.Signal(syscall.SIGKILL)
		// It may have ended on its own just before (a loss of an earlier
		// fault, --on-lost exit): dead is what counts.
		if code, ok := to.proc.Wait(10 * time.Second); !ok {
			w.t.Errorf("step-down-to: %s's leaderrun did not die of SIGKILL within 10s (exited: %v, code %d)", to.id, ok, code)
		}
		w.start(to)
	}
	at := fence.Now()
	r := w.control("step-down-to", how, timeout, "step-down", "--to", to.id)
	if how == "frozen" {
		_ = to.proc.Signal(syscall.SIGCONT)
		to.frozen = false
	}
	// Only the chosen candidate may lead before the request's until
	// (at + timeout; a second less for the command's own start). The
	// command returns once the new term is recorded, a moment before its
	// child says hello to the fence.
	var first fence.Instance
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(pollEvery) {
		for _, c := range w.fence.Instances() {
			if c.Epoch > in.Epoch && c.Hello > at && (first.Hello == 0 || c.Hello < first.Hello) {
				first = c
			}
		}
		if first.Hello != 0 || r.code != 0 || time.Now().After(deadline) {
			break
		}
	}
	if first.Hello != 0 && first.Writer != to.id && first.Hello.Sub(at) < timeout-time.Second {
		w.t.Errorf("step-down-to %s (%s): %s's child (epoch %d) started %v after the request, before the chosen candidate's and the %v timeout",
			to.id, how, first.Writer, first.Epoch, first.Hello.Sub(at).Round(time.Millisecond), timeout)
	}
	if r.code == 0 {
		w.checkNewTerm("step-down-to", in, at, r)
		if first.Writer == to.id {
			w.ctlCount("step-down-to", how).chosen++
		} else {
			w.t.Errorf("step-down-to %s (%s): exit 0, but the next child is %q's", to.id, how, first.Writer)
		}
	}
	return outcome{at: at, how: how + fmt.Sprintf(", to %s, exit %d", to.id, r.code)}
}

// pauseResume pauses the key, holds the pause for 1s and a random part of
// the TTL, and resumes it; at random a standby is frozen across the
// pause's start and woken in the middle of it, or a host is killed and
// started again in the middle of it. Between the pause's return and the
// resume, no write may be accepted and no child may start.
func pauseResume(w *world, h *host, in fence.Instance) outcome {
	how := []string{"alone", "alone", "standby frozen", "host restarted"}[w.rng.IntN(4)]
	var other *host
	switch how {
	case "standby frozen":
		sb := w.standbys(h)
		other = sb[w.rng.IntN(len(sb))]
		other.frozen = true
		_ = other.proc.Signal(syscall.SIGSTOP)
	case "host restarted":
		other = w.hosts[w.rng.IntN(len(w.hosts))]
	}
	from := w.fence.Len()
	at := fence.Now()
	r := w.control("pause", how, w.controlTimeout(), "pause", "--reason", "chaos")
	paused := r.done
	if r.code == 0 && Alive(in.Pid) {
		w.t.Errorf("pause (%s): exit 0 while the leader's child %d still runs", how, in.Pid)
	}
	hold := time.Second + time.Duration(w.rng.Int64N(int64(w.tm.TTL)))
	time.Sleep(hold / 2)
	how0 := how // the counters' key
	if other != nil {
		how += " (" + other.id + ")"
	}
	switch {
	case other != nil && other.frozen:
		_ = other.proc.Signal(syscall.SIGCONT)
		other.frozen = false
	case other != nil:
		_ = other.proc.Signal(syscall.SIGKILL)
		// It may have ended on its own just before (a loss of an earlier
		// fault, --on-lost exit): dead is what counts.
		if code, ok := other.proc.Wait(10 * time.Second); !ok {
			w.t.Errorf("pause: %s's leaderrun did not die of SIGKILL within 10s (exited: %v, code %d)", other.id, ok, code)
		}
		w.start(other)
	}
	time.Sleep(hold - hold/2)
	resumed := fence.Now()
	// A pause must end, or nothing runs again: retry a failed resume.
	for i := 0; i < 3; i++ {
		if w.control("resume", "", 10*time.Second, "resume").code == 0 {
			break
		}
	}
	if r.code == 0 {
		w.checkPaused(how, from, paused, resumed)
		c := w.ctlCount("pause", how0)
		c.held = append(c.held, resumed.Sub(paused))
	}
	return outcome{at: at, how: fmt.Sprintf("%s, paused %v, exit %d", how, resumed.Sub(paused).Round(time.Millisecond), r.code)}
}

// checkPaused fails the run for every accepted write and every child's
// start the fence saw between a pause's return and the resume.
func (w *world) checkPaused(how string, from int, paused, resumed fence.Mono) {
	l := w.fence.Log(from)
	n, first := 0, fence.Write{}
	for _, wr := range l.Writes {
		if wr.Accepted && wr.At > paused && wr.At < resumed {
			if n == 0 {
				first = wr
			}
			n++
		}
	}
	if n > 0 {
		in := l.Instances[first.Instance]
		w.t.Errorf("pause (%s): %d writes accepted while paused, the first %v after the pause returned, by %s (epoch %d)\n%s",
			how, n, first.At.Sub(paused).Round(time.Millisecond), in.Name(), in.Epoch, w.describe())
	}
	for _, in := range l.Instances {
		if in.Hello > paused && in.Hello < resumed {
			w.t.Errorf("pause (%s): child %s (epoch %d) started %v into the pause", how, in.Name(), in.Epoch, in.Hello.Sub(paused).Round(time.Millisecond))
		}
	}
}

// priorityChange restarts a random host with another random priority.
// When it is then above every other host's, it should lead within
// --preempt-after and a handover (counted, not a check: a preferred host
// that keeps failing backs off).
func priorityChange(w *world, h *host, in fence.Instance) outcome {
	x := w.hosts[w.rng.IntN(len(w.hosts))]
	p := x.priority
	for p == x.priority {
		p = w.rng.IntN(4)
	}
	how := fmt.Sprintf("%s %d -> %d", x.id, x.priority, p)
	if x == h {
		how += " (the leader)"
	}
	at := fence.Now()
	_ = x.proc.Signal(syscall.SIGTERM)
	code, ok := x.proc.Wait(30 * time.Second)
	if !ok || code != 143 && code != 123 {
		w.t.Errorf("priority: %s's leaderrun exited %d (exited: %v) after SIGTERM, want 143\n%s", x.id, code, ok, x.proc.Output(8<<10))
	}
	if !ok {
		x.proc.Kill()
	}
	x.priority = p
	w.start(x)
	c := w.ctlCount("priority", "restart")
	c.runs++
	c.ok++
	above := true
	for _, o := range w.standbys(x) {
		above = above && p > o.priority
	}
	if above {
		c.above++
		wait := preemptAfter + 3*w.tm.TTL + 10*time.Second
		deadline := time.Now().Add(wait)
		for time.Now().Before(deadline) {
			if l, _, ok := w.leader(); ok && l == x {
				c.aboveLed++
				how += ", led"
				break
			}
			time.Sleep(pollEvery)
		}
	}
	return outcome{at: at, how: how}
}

// controlNotes counts, per backend, the control commands that ran, how
// many exited 0 and how many timed out (1), and the pauses' lengths.
func controlNotes(runs []*backendRun) string {
	var b strings.Builder
	for _, r := range runs {
		if len(r.ctl) == 0 {
			continue
		}
		var keys []string
		for k := range r.ctl {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			cmd, how, _ := strings.Cut(k, "\x00")
			c := r.ctl[k]
			if how != "" {
				cmd += " (" + how + ")"
			}
			s := fmt.Sprintf("%s %d: %d exit 0, %d timed out (exit 1)", cmd, c.runs, c.ok, c.timedOut)
			switch {
			case strings.HasPrefix(k, "priority\x00"):
				s = fmt.Sprintf("priority restarts %d, %d of them above every other host, of which %d led within the wait", c.runs, c.above, c.aboveLed)
			case strings.HasPrefix(k, "step-down-to\x00"):
				s += fmt.Sprintf(", the chosen host led next in %d", c.chosen)
			}
			if c.raced > 0 {
				s += fmt.Sprintf(", %d refused (exit 125: the leader had changed or gone)", c.raced)
			}
			if c.other > 0 {
				s += fmt.Sprintf(", %d other exit", c.other)
			}
			if len(c.held) > 0 {
				s += ", held " + Ms(c.held.Median()) + " median / " + Ms(c.held.Max()) + " max"
			}
			if !strings.HasPrefix(k, "priority\x00") && len(c.took) > 0 {
				s += ", took " + Ms(c.took.Median()) + " median / " + Ms(c.took.Max()) + " max"
			}
			parts = append(parts, s)
		}
		fmt.Fprintf(&b, "\n- %s, control commands: %s", r.name, strings.Join(parts, "; "))
	}
	if b.Len() == 0 {
		return ""
	}
	return b.String() + "\n"
}

// priorityArgs are a host's --priority and --preempt-after when the
// control faults run.
func priorityArgs(h *host) []string {
	if !controlling() && h.priority == 0 {
		return nil
	}
	return []string{"--priority", strconv.Itoa(h.priority), "--preempt-after", preemptAfter.String()}
}
