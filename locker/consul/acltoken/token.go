// Package acltoken reads a Consul ACL token with Consul's own precedence. It
// links only the standard library, so the small guard binary uses it as
// well as locker/consul.
package acltoken

import (
	"os"
	"strings"

	"github.com/leaderrun/leaderrun/internal/secretfile"
)

// Read returns the token to send: the trimmed contents of the token file
// when one is named, else the token; with neither given, the same from
// CONSUL_HTTP_TOKEN_FILE and CONSUL_HTTP_TOKEN. file is the file it read
// ("" when none), for the caller's messages; err is the read's error.
func Read(tokenFile, token string) (tok, file string, err error) {
	file, tok = tokenFile, token
	if file == "" && tok == "" {
		file, tok = os.Getenv("CONSUL_HTTP_TOKEN_FILE"), os.Getenv("CONSUL_HTTP_TOKEN")
	}
	if file == "" {
		return tok, "", nil
	}
	data, err := secretfile.ReadFile(file) // a regular file only: never a FIFO's hang
	if err != nil {
		return "", file, err
	}
	return strings.TrimSpace(string(data)), file, nil
}
