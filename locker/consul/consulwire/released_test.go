package consulwire

import "testing"

func TestReleased(t *testing.T) {
	v := Released("7d1c")
	if got := ReleasedBy(v); got != "7d1c" {
		t.Fatalf("ReleasedBy(Released(7d1c)) = %q", got)
	}
	// What a holder's heartbeat, an older leaderrun's release, or a hand
	// edit leaves is no release marker.
	for _, v := range []string{"", "x", `{"id":"a","observe":"observer-clock/1","beat":3}`, `{"released":7}`, "null"} {
		if got := ReleasedBy([]byte(v)); got != "" {
			t.Errorf("ReleasedBy(%q) = %q, want none", v, got)
		}
	}
	for _, tc := range []struct {
		holder, value string
		want          bool
	}{
		{"", "", true},                          // freed by hand, emptied
		{"", `{"id":"a","beat":3}`, true},       // freed when the session was destroyed by hand
		{"", string(Released("other")), false},  // another holder's release
		{"s2", `{"id":"b"}`, false},             // held by another session
		{"s2", string(Released("7d1c")), false}, // held, whatever it says
	} {
		if got := Marks(tc.holder, []byte(tc.value)); got != tc.want {
			t.Errorf("Marks(%q, %q) = %v, want %v", tc.holder, tc.value, got, tc.want)
		}
	}
}
