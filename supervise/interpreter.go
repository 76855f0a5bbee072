//go:build linux

package supervise

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// shebangSize is how much of a script the kernel reads for its #! line
// (BINPRM_BUF_SIZE).
const shebangSize = 256

// crlfAdvice ends the message for a #! line that ends in a carriage return.
const crlfAdvice = "its #! line ends in a carriage return (CRLF line endings); convert it with dos2unix or sed -i 's/\\r$//'"

// checkInterpreter finds the interpreter a script names on its #! line, so
// that one that cannot run is reported before leaderrun campaigns (127 or
// 126, naming the interpreter) rather than after it won, as "no such file"
// for a script that plainly exists. The line is split as the kernel splits
// it: the interpreter runs to the first space or tab, so a carriage return
// left by CRLF line endings is part of its name. A file that cannot be read
// here, or whose line is too long to judge, is left for exec to judge; a
// file without #! is run by /bin/sh (forkExec) and needs nothing.
func checkInterpreter(name, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	head := make([]byte, shebangSize)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	if !bytes.HasPrefix(head, []byte("#!")) {
		return nil
	}
	line, _, complete := bytes.Cut(head[2:], []byte("\n"))
	line = bytes.TrimRight(bytes.TrimLeft(line, " \t"), " \t")
	end := bytes.IndexAny(line, " \t\x00")
	if end < 0 {
		end = len(line)
	}
	interp, arg := string(line[:end]), ""
	if end < len(line) {
		arg = strings.TrimLeft(string(line[end:]), " \t")
	}
	if !complete && arg == "" && n == shebangSize {
		// The interpreter may run past what the kernel reads.
		return nil
	}
	if interp == "" {
		return &StartError{Code: ExitNotExecutable, Err: fmt.Errorf("%s: empty #! line", name)}
	}
	if strings.HasSuffix(interp, "\r") {
		if _, err := os.Stat(interp); err != nil {
			return &StartError{Code: ExitNotFound, Err: fmt.Errorf("%s: %s", name, crlfAdvice)}
		}
	}
	info, err := os.Stat(interp)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &StartError{Code: ExitNotFound, Err: fmt.Errorf("%s: interpreter %s (from its #! line) not found", name, interp)}
	case err != nil:
		return nil
	case info.IsDir() || unix.Faccessat(unix.AT_FDCWD, interp, unix.X_OK, unix.AT_EACCESS) != nil:
		return &StartError{Code: ExitNotExecutable, Err: fmt.Errorf("%s: interpreter %s (from its #! line) is not executable", name, interp)}
	}
	// env looks its one argument up in PATH: "bash\r" is found nowhere.
	if filepath.Base(interp) == "env" && strings.HasSuffix(arg, "\r") && !strings.HasPrefix(arg, "-") {
		return &StartError{Code: ExitNotFound, Err: fmt.Errorf("%s: %s", name, crlfAdvice)}
	}
	return nil
}
