//go:build linux

package guard

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/leaderrun/leaderrun/locker"
)

// TestHelloNamesTheSlotInKey: a hello names the slot held by its name in
// the options' Key, as every release writes and reads it, and parses back
// into the key and the slot.
func TestHelloNamesTheSlotInKey(t *testing.T) {
	for _, o := range []locker.Options{{Key: "jobs", Slot: 2, ID: "a"}, {Key: "jobs", ID: "a"}} {
		b, err := json.Marshal(BackendHello{Backend: "etcd", Options: HelloOptions(o)})
		if err != nil {
			t.Fatal(err)
		}
		if want := `"Key":"` + o.Name() + `"`; !strings.Contains(string(b), want) || strings.Contains(string(b), "Slot") {
			t.Fatalf("hello %s: want %s and no Slot", b, want)
		}
		h, err := ParseBackendHello(b)
		if err != nil || h.Options.Key != "jobs" || h.Options.Slot != o.Slot || h.Options.ID != "a" {
			t.Fatalf("ParseBackendHello(%s) = %+v, %v", b, h.Options, err)
		}
	}
}
