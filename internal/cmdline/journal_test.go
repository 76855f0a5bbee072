package cmdline

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func TestJournalPrefixesCarryPriorities(t *testing.T) {
	var buf bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Name: "leaderrun", Level: hclog.Trace, Output: &journalWriter{w: &buf}})
	log.Debug("d")
	log.Info("i")
	log.Warn("w", "multi", "a\nb")
	log.Error("e")
	lines := bytes.Split(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), []byte("\n"))
	want := []string{"<7>", "<6>", "<4>", "<4>", "<4>", "<4>", "<4>", "<3>"}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, l := range lines {
		if !bytes.HasPrefix(l, []byte(want[i])) {
			t.Errorf("line %d %q: want prefix %s", i, l, want[i])
		}
	}

	buf.Reset()
	fmt.Fprintf(levelFixed{&journalWriter{w: &buf}, hclog.Error}, "leaderrun: --ttl bad\n")
	if got := buf.String(); got != "<3>leaderrun: --ttl bad\n" {
		t.Errorf("fatal error line = %q", got)
	}
}

func TestToJournalOnlyForTheNamedStream(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stream"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		stream string
		want   bool
	}{
		{fmt.Sprintf("%d:%d", st.Dev, st.Ino), true},
		{fmt.Sprintf("%d:%d", st.Dev, st.Ino+1), false}, // stderr was redirected
		{"", false},
		{"garbage", false},
	} {
		if got := toJournal(c.stream, f); got != c.want {
			t.Errorf("toJournal(%q) = %v, want %v", c.stream, got, c.want)
		}
	}
}
