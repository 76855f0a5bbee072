package e2e

import (
	"strconv"
	"testing"

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

func strconvItoa(n int64) string { return strconv.FormatInt(n, 10) }

// writeSelfSignedCA writes a throwaway CA certificate and returns its path:
// enough to make a client speak TLS to a server that does not.
func writeSelfSignedCA(t *testing.T) string {
	t.Helper()
	return testsupport.NewCA(t, t.TempDir(), "ca").Path
}
