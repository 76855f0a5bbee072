//go:build linux

package cmdline

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"

	"github.com/leaderrun/leaderrun/internal/secretfile"
	"github.com/leaderrun/leaderrun/locker"
)

const (
	envFileFlag = "env-file"
	unitFlag    = "unit"
)

// configDir holds the settings files of the packaged systemd unit
// leaderrun@NAME.service: leaderrun.env for every instance, then NAME.env.
var configDir = "/etc/leaderrun"

// sharedEnvFile is the file every instance reads first.
const sharedEnvFile = "leaderrun.env"

// loadEnvFiles applies the settings files a command line names, before its
// flags are parsed (flags read their variables while being parsed):
// --unit NAME's two files, then each --env-file in order (or those
// LEADERRUN_ENV_FILE names when no --env-file is given). A later file
// overrides an earlier one and the inherited environment, as systemd's
// EnvironmentFile= does; flags still win over all of them. Settings loaded
// for a run are also in the command's environment, as under systemd.
func loadEnvFiles(args []string) error {
	var files []string
	var unitFiles []string
	for i := 1; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			break
		}
		for _, name := range []string{envFileFlag, unitFlag} {
			value, ok := flagValue(args, &i, name)
			if !ok {
				continue
			}
			if value == "" {
				return fmt.Errorf("--%s needs a value", name)
			}
			if name == envFileFlag {
				files = append(files, value)
				continue
			}
			if err := locker.ValidateUserKey(value); err != nil {
				return fmt.Errorf("--unit %w", err)
			}
			shared := filepath.Join(configDir, sharedEnvFile)
			if _, err := os.Stat(shared); err == nil {
				unitFiles = append(unitFiles, shared)
			}
			unitFiles = append(unitFiles, filepath.Join(configDir, value+".env"))
		}
	}
	if len(files) == 0 && !internalCommand(args) {
		files = envFileVariable()
	}
	for i, f := range append(unitFiles, files...) {
		vars, err := readEnvFile(f)
		if err != nil && i < len(unitFiles) && errors.Is(err, fs.ErrPermission) {
			// The packaged unit's settings are root's, mode 600: a user
			// typing status --unit NAME needs root, or the options.
			return fmt.Errorf("%w: the settings of --unit are root's: run it as root (e.g. with sudo), or give the backend options yourself (--backend and its address) instead of --unit", err)
		}
		if err != nil {
			return err
		}
		for _, kv := range vars {
			name, value, _ := strings.Cut(kv, "=")
			if err := os.Setenv(name, value); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
		}
	}
	return nil
}

// envFileVariable are the files LEADERRUN_ENV_FILE names, as
// --env-file's variable: a comma-separated list. The command line's
// --env-file wins over it, as over any option's variable.
func envFileVariable() []string {
	var files []string
	for _, f := range strings.Split(os.Getenv("LEADERRUN_ENV_FILE"), ",") {
		if f = strings.TrimSpace(f); f != "" {
			files = append(files, f)
		}
	}
	return files
}

// internalCommand reports whether args run one of leaderrun's hidden
// helpers (the guard, a release), which read no settings files: they get
// everything they need from the leaderrun that started them.
func internalCommand(args []string) bool {
	return len(args) > 1 && (args[1] == guardCommandName || args[1] == releaseCommandName)
}

// flagValue reads "--name VALUE" or "--name=VALUE" at args[*i], moving *i
// past the value.
func flagValue(args []string, i *int, name string) (string, bool) {
	arg := args[*i]
	for _, dash := range []string{"--", "-"} {
		if arg == dash+name {
			if *i+1 >= len(args) {
				return "", true
			}
			*i++
			return args[*i], true
		}
		if v, ok := strings.CutPrefix(arg, dash+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// envName is a variable's name; compiled on first use (most runs read
// no environment file).
var envName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })

// readEnvFile reads VAR=value lines as systemd's EnvironmentFile= does:
// blank lines and lines starting with # or ; are skipped, a value may be
// quoted with ' or " (backslash escapes inside "…"), and a line ending in
// a backslash continues on the next.
func readEnvFile(path string) ([]string, error) {
	f, err := secretfile.Open(path) // a regular file only: never a FIFO's hang
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("settings file %s does not exist", path)
		}
		return nil, fmt.Errorf("read settings: %w", err)
	}
	defer f.Close()
	if err := trustedSettings(f, path); err != nil {
		return nil, err
	}
	var vars []string
	sc := bufio.NewScanner(f)
	n, pending := 0, ""
	for sc.Scan() {
		n++
		line := pending + sc.Text()
		if strings.HasSuffix(line, `\`) {
			pending = strings.TrimSuffix(line, `\`)
			continue
		}
		pending = ""
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		name = strings.TrimSpace(name)
		if rest, isExport := strings.CutPrefix(name, "export"); isExport && ok && rest != strings.TrimLeft(rest, " \t") && envName().MatchString(strings.TrimSpace(rest)) {
			return nil, fmt.Errorf("%s:%d: \"export\" is not allowed: settings files are systemd EnvironmentFile= lines, VAR=value without export", path, n)
		}
		if !ok || !envName().MatchString(name) {
			return nil, fmt.Errorf("%s:%d: not a VAR=value line", path, n)
		}
		vars = append(vars, name+"="+unquoteEnv(strings.TrimSpace(value)))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read settings %s: %w", path, err)
	}
	warnReadableSecrets(f, path, vars)
	return vars, nil
}

// warnReadableSecrets warns, once per file, when a settings file that
// other users may read sets a token, a password or a DSN holding one. It
// is a warning, not a refusal as ssh's for a private key: a unit's
// settings file that worked must not stop its unit on an upgrade.
func warnReadableSecrets(f *os.File, path string, vars []string) {
	var st syscall.Stat_t
	if syscall.Fstat(int(f.Fd()), &st) != nil || (st.Mode&0o004 == 0 && (st.Mode&0o040 == 0 || st.Gid == 0)) {
		return
	}
	for _, kv := range vars {
		name, value, _ := strings.Cut(kv, "=")
		if secretSetting(name, value) {
			fmt.Fprintf(warnOutput(), "leaderrun: warning: --%s %s: other users can read it (mode %04o) and it sets %s: chmod 600 it\n", envFileFlag, path, st.Mode&0o7777, name)
			return
		}
	}
}

// secretSetting reports whether a setting holds a secret: by its name
// (a token, password, secret or credentials), or as a DSN or URL with a
// password in it.
func secretSetting(name, value string) bool {
	upper := strings.ToUpper(name)
	for _, w := range []string{"TOKEN", "PASSWORD", "PASSWD", "SECRET", "CREDENTIAL"} {
		if strings.Contains(upper, w) {
			return true
		}
	}
	if strings.Contains(strings.ToLower(value), "password=") {
		return true
	}
	if _, rest, ok := strings.Cut(value, "://"); ok {
		userinfo, _, ok := strings.Cut(rest, "@")
		return ok && strings.Contains(userinfo, ":") && !strings.ContainsAny(userinfo, "/")
	}
	return false
}

// trustedSettings refuses a settings file that another user could have
// written: its variables become leaderrun's settings and the job's
// environment (LD_PRELOAD, PATH), so the file must be ours or root's and
// writable by nobody else, in a directory where nobody else can replace
// it (one others may write is fine only with the sticky bit, as /tmp).
func trustedSettings(f *os.File, path string) error {
	me := uint32(os.Geteuid())
	ours := func(uid uint32) bool { return uid == me || uid == 0 }
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("read settings %s: %w", path, err)
	}
	switch {
	case !ours(st.Uid):
		return fmt.Errorf("--%s %s: owned by uid %d, not by this user or root: refusing a file another user can change to set the job's environment", envFileFlag, path, st.Uid)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("--%s %s: mode %04o lets other users write it: refusing a file they could change to set the job's environment (chmod go-w it)", envFileFlag, path, st.Mode&0o7777)
	}
	dir := filepath.Dir(path)
	if err := syscall.Stat(dir, &st); err != nil {
		return fmt.Errorf("read settings %s: %w", path, err)
	}
	if !ours(st.Uid) || (st.Mode&0o022 != 0 && st.Mode&syscall.S_ISVTX == 0) {
		return fmt.Errorf("--%s %s: its directory %s (owner uid %d, mode %04o) lets other users replace it: refusing a file they could swap to set the job's environment", envFileFlag, path, dir, st.Uid, st.Mode&0o7777)
	}
	return nil
}

// unquoteEnv removes one pair of surrounding quotes.
func unquoteEnv(v string) string {
	if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
		return v[1 : len(v)-1]
	}
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		var b strings.Builder
		in := v[1 : len(v)-1]
		for i := 0; i < len(in); i++ {
			if in[i] == '\\' && i+1 < len(in) {
				i++
			}
			b.WriteByte(in[i])
		}
		return b.String()
	}
	return v
}
