//go:build linux

package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReportWriteRun: a run given a results folder that does not exist
// yet writes a new file named after its kind, day and backends, a second
// run of the same day gets a file of its own, and each adds its line at
// the top of the method doc's list, linked relative to the doc.
func TestReportWriteRun(t *testing.T) {
	dir := t.TempDir()
	index := filepath.Join(dir, "CHAOS.md")
	doc := "# Chaos\n\n## Results\n\n<!-- BEGIN chaos-runs -->\n- [old](results/old.md), tree abc: etcd; passed\n<!-- END chaos-runs -->\n\nAfter.\n"
	if err := os.WriteFile(index, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	when := time.Date(2026, 12, 7, 8, 52, 0, 0, time.UTC)
	run := Run{Path: filepath.Join(dir, "results") + "/", Index: index, List: "chaos-runs", Kind: "chaos", Desc: "etcd,postgres",
		When: when, Title: "Chaos run", Tree: "d6d9682", Summary: "etcd, postgres, 200 faults each; passed", Body: "Run on 2026-12-07.\n\n| a |\n"}
	first, err := WriteRun(run)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "results", "chaos-2026-12-07-etcd-postgres.md"); first != want {
		t.Errorf("first file %s, want %s", first, want)
	}
	b, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	if want := "# Chaos run\n\nMethod: [CHAOS.md](../CHAOS.md).\n\nRun on 2026-12-07.\n\n| a |\n"; string(b) != want {
		t.Errorf("file:\n%s\nwant:\n%s", b, want)
	}
	run.Path = filepath.Join(dir, "results") // an existing folder, no slash
	run.Summary = "etcd, postgres; FAILED"
	second, err := WriteRun(run)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(second) != "chaos-2026-12-07-etcd-postgres-2.md" {
		t.Errorf("second file %s: a run must not overwrite another's", second)
	}
	if b, _ := os.ReadFile(first); !strings.Contains(string(b), "| a |") {
		t.Errorf("first file changed: %s", b)
	}
	got, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	want := "# Chaos\n\n## Results\n\n<!-- BEGIN chaos-runs -->\n" +
		"- [2026-12-07 08:52 UTC](results/chaos-2026-12-07-etcd-postgres-2.md), tree d6d9682: etcd, postgres; FAILED\n" +
		"- [2026-12-07 08:52 UTC](results/chaos-2026-12-07-etcd-postgres.md), tree d6d9682: etcd, postgres, 200 faults each; passed\n" +
		"- [old](results/old.md), tree abc: etcd; passed\n<!-- END chaos-runs -->\n\nAfter.\n"
	if string(got) != want {
		t.Errorf("index:\n%s\nwant:\n%s", got, want)
	}
}

// TestReportWriteRunToFile: a file path is written whole, over what was
// there, and without an index nothing else is touched.
func TestReportWriteRunToFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.md")
	if err := os.WriteFile(path, []byte("old content\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file, err := WriteRun(Run{Path: path, Kind: "bench", Desc: "full", When: time.Now(), Title: "Benchmark run", Body: "Run on today.\n"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if file != path || string(b) != "# Benchmark run\n\nRun on today.\n" {
		t.Errorf("%s:\n%s", file, b)
	}
}

// TestReportAddToListWithoutMarkers: a doc without the list gets one at
// its end; the first line goes in as the list's only line.
func TestReportAddToListWithoutMarkers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "doc.md")
	if err := os.WriteFile(path, []byte("# Doc"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := AddToList(path, "runs", "- one"); err != nil {
		t.Fatal(err)
	}
	if err := AddToList(path, "runs", "- two"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if want := "# Doc\n\n<!-- BEGIN runs -->\n- two\n- one\n<!-- END runs -->\n"; string(b) != want {
		t.Errorf("doc:\n%q\nwant:\n%q", b, want)
	}
}

// TestReportSlug: what ran, as a file name's part.
func TestReportSlug(t *testing.T) {
	for in, want := range map[string]string{"etcd,postgres": "etcd-postgres", " Holders 3: local, etcd ": "holders-3-local-etcd", "full": "full"} {
		if got := Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
}
