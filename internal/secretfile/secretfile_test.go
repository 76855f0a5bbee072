package secretfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A FIFO, a directory or a device named as a credential file is refused
// at once; opening a FIFO with no writer to read it would wait for good.
func TestOnlyRegularFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, dir, "/dev/zero"} {
		done := make(chan error, 1)
		go func() { _, err := Read(path); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotRegular) {
				t.Errorf("Read(%s) = %v, want %v", path, err, ErrNotRegular)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Read(%s) still waits 10s later", path)
		}
	}
}

func TestRead(t *testing.T) {
	dir := t.TempDir()
	for content, want := range map[string]string{
		"s3cret":       "s3cret",
		"s3cret\n":     "s3cret",
		"s3cret\r\n":   "s3cret",
		"s3cret\n\n":   "s3cret\n",
		" s3 cret \n":  " s3 cret ",
		"user:pw\n":    "user:pw",
		"line1\nline2": "line1\nline2",
	} {
		path := filepath.Join(dir, "f")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := Read(path); err != nil || got != want {
			t.Errorf("Read(%q) = %q, %v; want %q", content, got, err, want)
		}
	}
	for name, content := range map[string]string{"empty": "", "a newline alone": "\n"} {
		path := filepath.Join(dir, "e")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(path); err == nil || !strings.Contains(err.Error(), "empty") {
			t.Errorf("%s: %v, want an error saying it is empty", name, err)
		}
	}
	if _, err := Read(filepath.Join(dir, "none")); err == nil || strings.Contains(err.Error(), dir) {
		t.Errorf("missing file: %v, want an error without the path", err)
	}
}

func TestExposed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for mode, want := range map[os.FileMode]string{
		0o600: "", 0o400: "", 0o620: "",
		0o640: "mode 0640: its group may read it",
		0o644: "mode 0644: every user of the host may read it",
		0o604: "mode 0604: every user of the host may read it",
	} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if got := Exposed(path); got != want {
			t.Errorf("mode %04o: %q, want %q", mode, got, want)
		}
	}
}
