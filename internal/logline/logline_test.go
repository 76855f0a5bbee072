package logline

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

func TestFoldJoinsLines(t *testing.T) {
	err := errors.Join(errors.New("etcd: delete election key /k: deadline exceeded"), errors.New("  etcd: revoke lease 1f: deadline exceeded\r\n"))
	if got, want := Fold(err.Error()), "etcd: delete election key /k: deadline exceeded; etcd: revoke lease 1f: deadline exceeded"; got != want {
		t.Fatalf("Fold = %q, want %q", got, want)
	}
	if got := Fold("one line"); got != "one line" {
		t.Fatalf("Fold of one line = %q", got)
	}
}

// TestWrapOneLineSeconds: through Wrap, a multi-line error and message make
// one record of one line, in text and JSON, and a duration is KEY_s seconds.
func TestWrapOneLineSeconds(t *testing.T) {
	for _, js := range []bool{false, true} {
		var buf bytes.Buffer
		log := Wrap(hclog.New(&hclog.LoggerOptions{Name: "leaderrun", JSONFormat: js, Output: &buf}))
		err := errors.Join(errors.New("first"), errors.New("second"))
		log.Named("sub").With("ttl", 15*time.Second).Warn("release failed\nbadly", "error", err, "lease_left", 14998*time.Millisecond, "wait_s", 2*time.Second)
		out := buf.String()
		if strings.Count(out, "\n") != 1 {
			t.Fatalf("json=%v: want one line, got:\n%s", js, out)
		}
		if !js {
			for _, want := range []string{"release failed; badly", `error="first; second"`, "lease_left_s=14.998", "wait_s=2", "ttl_s=15"} {
				if !strings.Contains(out, want) {
					t.Errorf("text lacks %q: %s", want, out)
				}
			}
			continue
		}
		var r map[string]any
		if err := json.Unmarshal(buf.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r["lease_left_s"] != 14.998 || r["wait_s"] != 2.0 || r["ttl_s"] != 15.0 || r["error"] != "first; second" || r["lease_left"] != nil {
			t.Fatalf("json record %v", r)
		}
	}
}

func TestFirstThisBoot(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	if !FirstThisBoot("a") || FirstThisBoot("a") || !FirstThisBoot("b") {
		t.Fatal("want true once per what, then false")
	}
}
