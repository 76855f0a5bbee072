//go:build linux

package e2e

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
)

// hostile is text a record on the backend may carry to a terminal: a
// screen clear, a carriage return and a newline that forge a line, a
// right-to-left override, a C1 CSI, DEL and a tab.
const hostile = "\x1b[2J\r\nleader   attacker\u202egnp.exe\u009b31m\x7f\tz"

// forged is the line hostile forges when it reaches a terminal raw.
const forged = "\nleader   attacker"

func TestUntrustedOutputLocal(t *testing.T) {
	t.Parallel()
	untrustedOutput(t, localControl(t))
}

func TestUntrustedOutputEtcd(t *testing.T) {
	t.Parallel()
	untrustedOutput(t, etcdControl(t))
}

// untrustedOutput: a holder's --id, a pause's reason and a control record
// written by hand carry control characters; status, history, check and
// the control commands print none of them raw, in text or JSON, and the
// JSON still says what the records say.
func untrustedOutput(t *testing.T, b controlBackend) {
	key, mark, env := markedKey("hostile")
	q := queryArgs(b.args(key))
	// --id refuses control characters (TestIDRule); what it lets through
	// and a terminal must still not take raw is a bidi override.
	id := "h\u202egnp.exe"
	p := start(t, "hostile", env, withCommand(append(b.args(key), "--id", id), "exec sleep 1000")...)
	defer stopAll(p)
	var epoch uint64
	waitFor(t, 30*time.Second, "the hostile holder leading", func() bool { _, epoch = leaderChild(mark); return epoch != 0 })

	clean := func(what string, args ...string) (int, string, string) {
		t.Helper()
		code, out, errOut, _ := runOnce(t, nil, append(args, q...)...)
		for name, s := range map[string]string{"stdout": out, "stderr": errOut} {
			for _, r := range s {
				if r != '\n' && !unicode.IsPrint(r) {
					t.Errorf("%s: %q reaches %s raw:\n%s", what, r, name, s)
					break
				}
			}
			if strings.Contains(s, forged) {
				t.Errorf("%s: a record forges a line on %s:\n%s", what, name, s)
			}
		}
		return code, out, errOut
	}
	jsonID := func(what, out string, get func(doc map[string]any) any) {
		t.Helper()
		var doc map[string]any
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Errorf("%s: not JSON: %v\n%s", what, err, out)
			return
		}
		if got := get(doc); got != id {
			t.Errorf("%s: the holder's id reads %q, want %q", what, got, id)
		}
	}
	field := func(path ...any) func(map[string]any) any {
		return func(doc map[string]any) any {
			var v any = doc
			for _, p := range path {
				switch k := p.(type) {
				case string:
					m, _ := v.(map[string]any)
					v = m[k]
				case int:
					l, _ := v.([]any)
					if k >= len(l) {
						return nil
					}
					v = l[k]
				}
			}
			return v
		}
	}

	clean("status", "status")
	_, out, _ := clean("status --json", "status", "--json")
	jsonID("status --json", out, field("leader", "id"))
	clean("status --holders", "status", "--holders", "1")
	_, out, _ = clean("status --holders --json", "status", "--holders", "1", "--json")
	jsonID("status --holders --json", out, field("slots", 0, "leader", "id"))
	if code, _, errOut := clean("check", "check", "--epoch", strconv.FormatUint(epoch+1, 10)); code != 1 || !strings.Contains(errOut, `\u202e`) {
		t.Errorf("check of another epoch: exit %d, %q; want 1 naming the holder, escaped", code, errOut)
	}
	code, out, errOut := clean("step-down", "step-down", "--timeout", "5s")
	t.Logf("step-down: exit %d\n%s%s", code, out, errOut)
	waitFor(t, 30*time.Second, "the hostile holder leading again", func() bool { e, _ := leaderChild(mark); return e != "" })

	// A pause whose reason is hostile ends the term with it: status and
	// history show it, pause and resume say it.
	if code, _, errOut := clean("pause", "pause", "--reason", "r"+hostile); code != 0 {
		t.Fatalf("pause: exit %d, %q", code, errOut)
	}
	clean("status while paused", "status")
	clean("history", "history")
	_, out, _ = clean("history --json", "history", "--json")
	jsonID("history --json", out, field("terms", 0, "id"))
	clean("resume", "resume")

	// A record written by hand, every text in it hostile.
	hb, _ := json.Marshal(hostile)
	h := string(hb)
	until := strconv.Quote(time.Now().Add(30 * time.Minute).UTC().Format(time.RFC3339))
	b.put(t, key, `{"pause":{"by":`+h+`,"since":"2026-01-01T00:00:00Z","reason":`+h+`},"step_down":{"key":`+h+
		`,"epoch":1,"to":`+h+`,"by":`+h+`,"at":"2026-01-01T00:00:00Z","until":`+until+`}}`)
	clean("status of a hand-written record", "status")
	_, out, _ = clean("status --json of a hand-written record", "status", "--json")
	var st struct {
		Paused struct{ Reason string } `json:"paused"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Paused.Reason != hostile {
		t.Errorf("status --json: the pause's reason reads %q (%v), want %q", st.Paused.Reason, err, hostile)
	}
	clean("step-down over a hand-written pause", "step-down", "--timeout", "5s")
	clean("resume of a hand-written record", "resume")
}
