//go:build linux

// Package testcluster runs real etcd and Consul servers for leaderrun's
// integration tests.
//
// The servers are the binaries that scripts/build-servers.sh builds into the
// repository's bin/ folder (from the separate modules under tools/). Every
// server runs on loopback ports chosen at start, keeps its data and its log
// in the test's temporary directory, and is killed when the test ends, even
// when it fails or panics. Waiting is always polling with a deadline, so a
// slow, shared machine makes a test slower, not flaky.
//
// The package imports only the standard library: readiness is checked over
// the servers' plain HTTP endpoints, so tests that merely need a cluster do
// not pull in client libraries they do not use.
package testcluster

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// modulePath identifies the repository root: the go.mod that declares it.
// The server modules under tools/ have go.mod files too, so a plain "nearest
// go.mod" search would stop too early.
const modulePath = "github.com/leaderrun/leaderrun"

// BinEnv names the environment variable that points at a folder holding
// prebuilt server binaries, for runs outside the repository (e.g. a packaged
// test binary) or with binaries built elsewhere.
const BinEnv = "LEADERRUN_SERVER_BIN"

// buildHint tells a developer how to get the missing binaries.
const buildHint = "run `make servers` (or scripts/build-servers.sh) to build the test servers into bin/"

// Bin returns the path of the server binary name (e.g. "etcd", "etcdctl",
// "consul"): $LEADERRUN_SERVER_BIN/name when that variable is set, else
// bin/name at the repository root found by walking up from the working
// directory.
//
// A missing binary skips the test with a hint on how to build it, so a fresh
// checkout still runs its unit tests; under CI=true it fails the test
// instead, because there a skipped integration test would hide a broken
// build step.
func Bin(t testing.TB, name string) string {
	t.Helper()
	path, err := binPath(name)
	if err == nil {
		var info os.FileInfo
		info, err = os.Stat(path)
		if err == nil && (info.IsDir() || info.Mode().Perm()&0o111 == 0) {
			err = fmt.Errorf("%s is not an executable file", path)
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("testcluster: server binary %q unavailable: %v; %s", name, err, buildHint)
		}
		t.Skipf("testcluster: server binary %q unavailable: %v; %s", name, err, buildHint)
	}
	return path
}

// binPath works out where the binary should be without checking that it is
// there.
func binPath(name string) (string, error) {
	if dir := os.Getenv(BinEnv); dir != "" {
		return filepath.Join(dir, name), nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin", name), nil
}

// repoRoot walks up from the working directory (a package directory under
// `go test`) to the folder whose go.mod declares modulePath.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		ok, err := declaresModule(filepath.Join(dir, "go.mod"))
		if err != nil {
			return "", err
		}
		if ok {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod declaring module %s above the working directory", modulePath)
		}
		dir = parent
	}
}

// declaresModule reports whether the go.mod at path exists and its module
// line names modulePath.
func declaresModule(path string) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == modulePath, nil
		}
	}
	return false, sc.Err()
}
