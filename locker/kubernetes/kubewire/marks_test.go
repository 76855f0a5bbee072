package kubewire

import "testing"

func TestMarks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		holder string
		ann    map[string]string
		want   bool
	}{
		{"held by the term", "a", map[string]string{AnnTerm: "t1"}, true},
		{"held by another term", "b", map[string]string{AnnTerm: "t2"}, false},
		{"held, annotations removed", "a", nil, false},
		{"holder cleared by hand", "", map[string]string{AnnTerm: "t1"}, true},
		{"emptied", "", nil, true},
		{"released by another term", "", map[string]string{AnnReleased: "t2"}, false},
		{"released by the term", "", map[string]string{AnnReleased: "t1"}, false},
	} {
		if got := Marks(tc.holder, tc.ann, "t1"); got != tc.want {
			t.Errorf("%s: Marks = %v, want %v", tc.name, got, tc.want)
		}
	}
}
