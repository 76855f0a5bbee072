//go:build linux

package testcluster

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDynaliteStartsAndStops(t *testing.T) {
	d := StartDynalite(t)
	if err := d.ping(); err != nil {
		t.Fatalf("ListTables on a fresh server: %v", err)
	}
	d.Kill()
	if d.ping() == nil {
		t.Fatal("the server answers after Kill")
	}
}

// TestDynaliteBinPrefersTheVariable: $LEADERRUN_DYNALITE, when it names a
// file, wins over bin/ and PATH.
func TestDynaliteBinPrefersTheVariable(t *testing.T) {
	p := filepath.Join(t.TempDir(), "dynalite")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(DynaliteEnv, p)
	if got, err := dynaliteBin(); err != nil || got != p {
		t.Fatalf("dynaliteBin = %q, %v; want %q", got, err, p)
	}
}
