//go:build linux

package supervise

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// checkInterpreter finds the interpreter a script names on its #! line, so
// that a missing one is reported before leaderrun campaigns (127, naming
// the interpreter) rather than after it won, as "no such file" for a script
// that plainly exists. A file that cannot be read here is left for exec to
// judge.
func checkInterpreter(name, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	head := make([]byte, 256)
	n, _ := f.Read(head)
	head = head[:n]
	if !bytes.HasPrefix(head, []byte("#!")) {
		return nil
	}
	line, _, _ := bytes.Cut(head[2:], []byte("\n"))
	fields := strings.Fields(string(line))
	if len(fields) == 0 {
		return &StartError{Code: ExitNotExecutable, Err: fmt.Errorf("%s: empty #! line", name)}
	}
	interp := fields[0]
	info, err := os.Stat(interp)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &StartError{Code: ExitNotFound, Err: fmt.Errorf("%s: interpreter %s (from its #! line) not found", name, interp)}
	case err == nil && (info.IsDir() || info.Mode()&0o111 == 0):
		return &StartError{Code: ExitNotExecutable, Err: fmt.Errorf("%s: interpreter %s (from its #! line) is not executable", name, interp)}
	}
	return nil
}
