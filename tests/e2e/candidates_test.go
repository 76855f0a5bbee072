//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"

	"github.com/leaderrun/leaderrun/tests/testcluster"
)

// candidatesJSON is what status --json says of who waits.
type candidatesJSON struct {
	Leader *struct {
		ID string `json:"id"`
	} `json:"leader"`
	Candidates *[]struct {
		Place    int        `json:"place"`
		ID       string     `json:"id"`
		Hostname *string    `json:"hostname"`
		PID      *int       `json:"pid"`
		Priority *int       `json:"priority"`
		Since    *time.Time `json:"since"`
	} `json:"candidates"`
}

// waitCandidates runs status --json with args until its leader is leader
// and its candidates are want (by --id, in order, with their host and
// pid), and returns the text status then printed.
func waitCandidates(t *testing.T, args []string, leader string, want ...*host) string {
	t.Helper()
	hostname, _ := os.Hostname()
	var ids []string
	for _, h := range want {
		ids = append(ids, h.name)
	}
	var last string
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, out, errOut, _ := runOnce(t, nil, append([]string{"status", "--json"}, args...)...)
		last = fmt.Sprintf("exit %d\n%s%s", code, out, errOut)
		var st candidatesJSON
		if err := json.Unmarshal([]byte(out), &st); err == nil && st.Leader != nil && st.Leader.ID == leader && st.Candidates != nil {
			ok := len(*st.Candidates) == len(want)
			for i, c := range *st.Candidates {
				if !ok {
					break
				}
				ok = c.Place == i && c.ID == want[i].name && c.Hostname != nil && *c.Hostname == hostname &&
					c.PID != nil && *c.PID == want[i].p.Pid() && c.Priority != nil && *c.Priority == 0 &&
					c.Since != nil && time.Since(*c.Since) < 5*time.Minute
			}
			if ok {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("status --json never listed leader %s and candidates %v; last:\n%s", leader, ids, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
	code, out, errOut, _ := runOnce(t, nil, append([]string{"status"}, args...)...)
	if code != 0 {
		t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
	}
	return out
}

// candidatesMove: a leader a and two standbys, b then c. status lists b
// and c in that order, with their host and pid, under the leader table;
// once a is killed and b leads, it lists c alone, next. unordered: the
// backend keeps no queue (local), the standbys are listed in the order
// they began to wait, and either may take over.
func candidatesMove(t *testing.T, args []string, unordered bool) {
	status := queryArgs(args) // the backend and the key: what status takes
	dir := t.TempDir()
	a := startHost(t, dir, "a", "b", args)
	a.waitStarted(t, 30*time.Second)
	b := startHost(t, dir, "b", "a", args)
	waitFor(t, 10*time.Second, "b to campaign", func() bool { return strings.Contains(b.p.Output(), "waiting for the holder") })
	c := startHost(t, dir, "c", "a", args)
	waitFor(t, 10*time.Second, "c to campaign", func() bool { return strings.Contains(c.p.Output(), "waiting for the holder") })

	text := waitCandidates(t, status, "a", b, c)
	hostname, _ := os.Hostname()
	for i, h := range []*host{b, c} {
		line := fmt.Sprintf(`(?m)^  %d  %s\s+%s\s+%d\s+0\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`, i, h.name, regexp.QuoteMeta(hostname), h.p.Pid())
		if !regexp.MustCompile(line).MatchString(text) {
			t.Errorf("status lacks %s in place %d:\n%s", h.name, i, text)
		}
	}
	if i := strings.Index(text, "candidates: 2 waiting"); i < 0 || !strings.Contains(text[:i], "leader    a\n") {
		t.Errorf("no candidates' section under the leader table:\n%s", text)
	}
	t.Logf("while a leads:\n%s", text)

	a.p.Signal(syscall.SIGKILL)
	won, left := b, c
	if unordered {
		waitFor(t, 30*time.Second, "a standby's child to start", func() bool { return b.started() || c.started() })
		if c.started() {
			won, left = c, b
		}
	}
	won.waitStarted(t, 30*time.Second)
	won.noOverlap(t)
	text = waitCandidates(t, status, won.name, left)
	if !regexp.MustCompile(`(?m)^  0  ` + left.name + `\s+\S+\s+` + strconv.Itoa(left.p.Pid()) + `\s`).MatchString(text) {
		t.Errorf("after the failover, status lacks %s next:\n%s", left.name, text)
	}
	t.Logf("once %s leads:\n%s", won.name, text)
}

// candidatesHealth: a standby whose --health-cmd starts failing while it
// waits withdraws: status lists it no more, and once its check passes
// again it is listed behind the standby that stayed.
func candidatesHealth(t *testing.T, args []string) {
	status := queryArgs(args)
	dir := t.TempDir()
	sick := dir + "/sick"
	a := startHost(t, dir, "a", "b", args)
	a.waitStarted(t, 30*time.Second)
	h := startHost(t, dir, "h", "a", append(slices.Clone(args), "--health-cmd", "test ! -e "+sick, "--health-interval", "200ms"))
	waitFor(t, 10*time.Second, "h to campaign", func() bool { return strings.Contains(h.p.Output(), "waiting for the holder") })
	b := startHost(t, dir, "b", "a", args)
	waitFor(t, 10*time.Second, "b to campaign", func() bool { return strings.Contains(b.p.Output(), "waiting for the holder") })
	waitCandidates(t, status, "a", h, b)

	if err := os.WriteFile(sick, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "h to stop campaigning", func() bool { return strings.Contains(h.p.Output(), "not campaigning") })
	waitCandidates(t, status, "a", b)
	if err := os.Remove(sick); err != nil {
		t.Fatal(err)
	}
	text := waitCandidates(t, status, "a", b, h)
	t.Logf("once h's check passed again:\n%s", text)
}

// candidatesUnlisted: a leader and a standby on a backend whose waiting
// candidates leave nothing to list: status says so, and --json has
// "candidates": null.
func candidatesUnlisted(t *testing.T, args []string) {
	status := queryArgs(args)
	dir := t.TempDir()
	a := startHost(t, dir, "a", "b", args)
	a.waitStarted(t, 30*time.Second)
	b := startHost(t, dir, "b", "a", args)
	waitFor(t, 10*time.Second, "b to campaign", func() bool { return strings.Contains(b.p.Output(), "waiting for the holder") })
	code, out, errOut, _ := runOnce(t, nil, append([]string{"status"}, status...)...)
	if code != 0 || !regexp.MustCompile(`(?m)^leader\s+a\n(.*\n)*candidates: not listed by this backend\n$`).MatchString(out) || errOut != "" {
		t.Errorf("status: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _, _ = runOnce(t, nil, append([]string{"status", "--json"}, status...)...)
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil || string(doc["candidates"]) != "null" {
		t.Errorf("status --json: exit %d, %v\n%s", code, err, out)
	}
}

func TestCandidates(t *testing.T) {
	t.Run("local", func(t *testing.T) {
		t.Parallel()
		candidatesMove(t, localArgs(t.TempDir(), newKey("candidates")), true)
	})
	t.Run("etcd", func(t *testing.T) {
		t.Parallel()
		e := testcluster.StartEtcd(t, 1).Endpoints()
		candidatesMove(t, etcdArgs(e, newKey("candidates")), false)
		candidatesHealth(t, etcdArgs(e, newKey("candidates")))
	})
	t.Run("zookeeper", func(t *testing.T) {
		t.Parallel()
		z := testcluster.StartZooKeeper(t, testcluster.ZooKeeperOptions{Servers: 1})
		candidatesMove(t, zkArgs(z.Addrs(), newKey("candidates")), false)
	})
	t.Run("consul", func(t *testing.T) {
		t.Parallel()
		c := testcluster.StartConsul(t, testcluster.ConsulOptions{Servers: 1})
		candidatesMove(t, consulArgs(c.HTTPAddr(0), newKey("candidates")), false)
		candidatesHealth(t, consulArgs(c.HTTPAddr(0), newKey("candidates")))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		candidatesUnlisted(t, pgArgs(testcluster.StartPostgres(t).DSN(), newKey("candidates")))
	})
	t.Run("kubernetes", func(t *testing.T) {
		t.Parallel()
		e := testcluster.StartEtcd(t, 1)
		k := testcluster.StartKube(t, e, testcluster.KubeUser{Name: "nobody"})
		candidatesMove(t, kubeArgs(k.Kubeconfig(t, k.Token(testcluster.KubeAdmin), ""), newKey("candidates")), false)
	})
}

// An election key written by hand, every text in it hostile, is listed
// as a candidate: status prints none of it raw and keeps its lines within
// 80 columns; --json still says what the entry says.
func TestCandidatesUntrusted(t *testing.T) {
	t.Parallel()
	eps := testcluster.StartEtcd(t, 1).Endpoints()
	key := newKey("candidates")
	args := etcdArgs(eps, key)
	a := startHost(t, t.TempDir(), "a", "b", args)
	a.waitStarted(t, 30*time.Second)
	hb, _ := json.Marshal(hostile)
	h := string(hb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := etcdClient(t, eps).Put(ctx, "/leaderrun/"+key+"/@hostile", `{"id":`+h+`,"hostname":`+h+`,"pid":7}`); err != nil {
		t.Fatal(err)
	}
	q := queryArgs(args)
	code, out, errOut, _ := runOnce(t, nil, append([]string{"status"}, q...)...)
	if code != 0 || !strings.Contains(out, "candidates: 1 waiting") {
		t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
	}
	for _, line := range strings.Split(out, "\n") {
		if n := len([]rune(line)); n > 80 {
			t.Errorf("a line of %d columns: %q", n, line)
		}
		for _, r := range line {
			if !unicode.IsPrint(r) {
				t.Errorf("%q reaches the terminal raw: %q", r, line)
				break
			}
		}
	}
	if strings.Contains(out, forged) {
		t.Errorf("a candidate's entry forges a line:\n%s", out)
	}
	_, out, _, _ = runOnce(t, nil, append([]string{"status", "--json"}, q...)...)
	var st candidatesJSON
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Candidates == nil || len(*st.Candidates) != 1 ||
		(*st.Candidates)[0].ID != hostile || *(*st.Candidates)[0].Hostname != hostile {
		t.Errorf("status --json: %v\n%s", err, out)
	}
	if strings.ContainsAny(out, "\x1b\r\u202e\u009b\x7f") {
		t.Errorf("status --json sends a control character raw:\n%s", out)
	}
}
