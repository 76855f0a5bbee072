package consul

import (
	"strings"
	"testing"
	"time"

	"github.com/leaderrun/leaderrun/locker/queue"
)

// An entry's value carries who its candidate is, which an older release
// neither wrote nor reads: it still finds the place after the last
// " ahead=", and a newer one reads the ID of an older one's value.
func TestEntryValueWho(t *testing.T) {
	who := queue.Who{Hostname: "h 1", PID: 42, Priority: 3, Since: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	v := string(entryValue("node a {x}", 7, who.Encode(), 1))
	// What an older release reads of it: the place alone.
	if i := strings.LastIndex(v, " ahead="); v[i+len(" ahead="):] != "1" {
		t.Fatalf("an older release reads the place of %q as %q", v, v[i+len(" ahead="):])
	}
	id, got, ok := parseEntryValue(v)
	if !ok || id != "node a {x}" || got != who {
		t.Fatalf("parseEntryValue(%q) = %q, %+v, %v", v, id, got, ok)
	}
	for _, old := range []string{"node a 7 ahead=?", "node a 7"} {
		if id, _, ok := parseEntryValue(old); ok || id != "node a" {
			t.Errorf("parseEntryValue(%q) = %q, %v; want the ID, undescribed", old, id, ok)
		}
	}
}
