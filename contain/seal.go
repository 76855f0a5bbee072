//go:build linux

package contain

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// The seal of a job marker (DESIGN §1.9). A token's key part is no secret:
// a job's cgroup is named after its token and /proc/PID/cgroup is readable
// by every user, and the rest names a leaderrun that need only be dead. So
// another user could start processes of their own carrying a marker of
// root's key and a dead leaderrun, and root's sweep would kill them, or
// stall on them if they kept respawning. The marker in a job's environment
// therefore carries a seal: an HMAC of the token under a key that only
// leaderrun's user can read, kept in a file of its own on the host
// (sealDir). A process whose marker has a good seal is a leftover whatever
// user it runs as (a job may switch user in place: setpriv, runuser,
// gosu); one whose marker has none, or a bad one, only if it runs as
// leaderrun's own user, who could kill it anyway.
//
// The seal goes into the token's second field, after a '-', so a version
// that does not know it still reads the token; the cgroup's name keeps the
// unsealed token, so the seal is found only in the environment of the job's
// processes, which only their user and root may read.

// sealName is the key's file in sealDir.
const sealName = "marker.key"

// sealLen is the size of the key in bytes, and sealHex the seal's length in
// hex digits.
const (
	sealLen = 32
	sealHex = 24
)

// sealDir is where the key is kept: the lock directory the local backend
// uses by default, /run/leaderrun for root and /tmp/leaderrun-UID for
// anyone else. Like it, it never depends on the environment, so a job
// started from cron is judged by a leaderrun started from a login shell.
// Tests point it elsewhere.
var sealDir = func() string {
	if os.Geteuid() == 0 {
		return "/run/leaderrun"
	}
	return "/tmp/leaderrun-" + strconv.Itoa(os.Geteuid())
}

// sealKey is the host's key for this user, nil where it cannot be had (a
// directory another user made first, a read-only /run): markers are then
// unsealed and judged by their process's user alone.
func sealKey() []byte {
	k, _ := sealKeyErr()
	return k
}

var sealKeyErr = sync.OnceValues(func() ([]byte, error) {
	dir := sealDir()
	k, err := loadSealKey(dir)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", dir, sealName, err)
	}
	return k, nil
})

// SealError says why job markers cannot be sealed (nil when they are): a
// job that switches user in place is then not found by its marker once its
// leaderrun and guard are dead (DESIGN §1.9).
func SealError() error {
	_, err := sealKeyErr()
	return err
}

// loadSealKey reads the key in dir, making dir (0700) and the key if they
// are missing. dir must be this user's and no one else's to write in; the
// key's file must be this user's, readable by no one else, never a link.
func loadSealKey(dir string) ([]byte, error) {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	dfd, err := openPrivateDir(dir)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	for range 3 {
		k, err := readSealKey(dfd)
		if !errors.Is(err, unix.ENOENT) {
			return k, err
		}
		if err := makeSealKey(dfd); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, err
		}
	}
	return nil, errors.New("the marker key keeps vanishing")
}

// openPrivateDir opens dir, never through a link, if it is this user's
// and no one else may write in it.
func openPrivateDir(dir string) (int, error) {
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		unix.Close(dfd)
		return -1, fmt.Errorf("%s is not a private directory of uid %d", dir, os.Geteuid())
	}
	return dfd, nil
}

// readSealKey reads the key's file from the directory dfd.
func readSealKey(dfd int) ([]byte, error) {
	fd, err := unix.Openat(dfd, sealName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() || st.Mode&0o077 != 0 || st.Size != sealLen {
		return nil, errors.New("the marker key is not a private file of " + strconv.Itoa(sealLen) + " bytes")
	}
	k := make([]byte, sealLen)
	if n, err := unix.Read(fd, k); err != nil || n != sealLen {
		return nil, errors.New("the marker key cannot be read whole")
	}
	return k, nil
}

// makeSealKey writes a fresh key under a name of its own and links it into
// place, so that it is never seen half-written and a key another leaderrun
// linked first wins (EEXIST).
func makeSealKey(dfd int) error {
	k := make([]byte, sealLen)
	if _, err := rand.Read(k); err != nil {
		return err
	}
	return writePrivate(dfd, sealName, k, false)
}

// writePrivate writes data to a file of its own in the directory dfd, 0600
// and never through a link, and then puts it in place as name: linked,
// failing with EEXIST if name exists, or with replace renamed over it. A
// reader never sees it half-written.
func writePrivate(dfd int, name string, data []byte, replace bool) error {
	return writeFile(dfd, name, data, replace, 0o600)
}

// writeFile is writePrivate with mode, which may add the sticky bit to
// 0600.
func writeFile(dfd int, name string, data []byte, replace bool, mode uint32) error {
	tmp := name + "." + strconv.Itoa(os.Getpid())
	_ = unix.Unlinkat(dfd, tmp, 0)
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	if mode != 0o600 {
		err = unix.Fchmod(fd, mode)
	}
	n := len(data)
	if err == nil {
		n, err = unix.Write(fd, data)
	}
	unix.Close(fd)
	if err == nil && n != len(data) {
		err = errors.New("short write")
	}
	switch {
	case err != nil:
	case replace:
		if err = unix.Renameat(dfd, tmp, dfd, name); err == nil {
			return nil
		}
	default:
		err = unix.Linkat(dfd, tmp, dfd, name, 0)
	}
	_ = unix.Unlinkat(dfd, tmp, 0)
	return err
}

// seal is base's seal under key.
func seal(key []byte, base string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(base))
	return hex.EncodeToString(m.Sum(nil))[:sealHex]
}

// sealed is base with its seal in the second field, or base itself
// without a key.
func sealed(base string) string {
	key := sealKey()
	if key == nil {
		return base
	}
	f := strings.SplitN(base, ".", 3)
	if len(f) != 3 {
		return base
	}
	return f[0] + "." + f[1] + "-" + seal(key, base) + "." + f[2]
}

// unseal splits tok into the token without its seal (what a job's cgroup is
// named after) and the seal, "" when it has none.
func unseal(tok string) (base, s string) {
	f := strings.SplitN(tok, ".", 3)
	if len(f) != 3 {
		return tok, ""
	}
	n, s, ok := strings.Cut(f[1], "-")
	if !ok {
		return tok, ""
	}
	return f[0] + "." + n + "." + f[2], s
}

// sealGood reports whether s is base's seal under this user's key.
func sealGood(base, s string) bool {
	key := sealKey()
	return key != nil && len(s) == sealHex && hmac.Equal([]byte(s), []byte(seal(key, base)))
}

// Jobs seen over (DESIGN §1.9). A sealed marker can be read by the user a
// step of the job ran as (setpriv, runuser), and replayed by that user in
// processes of their own once the job is over: its leaderrun is dead and
// its seal good for good, and every later sweep of the key would kill them
// and, were they respawned, never settle. But the jobs of one key on one
// host run one after another: a job starts only once every earlier one is
// gone (its leaderrun stopped it, or a sweep killed it). So once a job is
// seen gone, by its leaderrun or its guard, every job of the key whose
// token is no younger is over too: the youngest such token's MONO is kept
// in ended.KEY beside the seal's key, and another user's process whose
// sealed job token is no younger is no leftover.
//
// A health check's token is judged so against the checks that are over,
// kept apart in ended-checks.KEY: a standby's checks run beside the
// leader's job, so a check's end says nothing of the job's. A check is
// over once its leaderrun removed it, seen gone or not: in group mode
// that user's copies of a running check's marker are the check's, so it
// is never seen gone while they are kept up. Nor do the checks of a key
// on one host always run one after another (a standby's beside the
// leader's). So what of a check that switched user survived its kill, or
// was cut off by the SIGKILL of its leaderrun and guard while a younger
// check of the key ended, is missed: it runs on as that user. That is no
// second job (a check runs beside the job on every standby anyway), where
// a replay of a check's marker blocked every later term of the key.

// endedName is the file of key's (a token's KEY part) youngest job seen
// gone, or health check over.
func endedName(key string, check bool) string {
	if check {
		return "ended-checks." + key
	}
	return "ended." + key
}

// markEnded records that the job of token tok is gone, or its health
// check over, if tok is sealed.
func markEnded(tok string) {
	base, sl := unseal(tok)
	f := strings.Split(base, ".")
	if sl == "" || len(f) != 6 {
		return
	}
	mono, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return
	}
	dfd, err := openPrivateDir(sealDir())
	if err != nil {
		return
	}
	defer unix.Close(dfd)
	name := endedName(f[5], IsCheckToken(base))
	if readEnded(dfd, name) >= mono {
		return
	}
	_ = writePrivate(dfd, name, []byte(strconv.FormatInt(mono, 10)+"\n"), true)
}

// endedUpTo is the MONO of key's youngest job (or health check, with
// check) seen gone, 0 if none.
func endedUpTo(key string, check bool) int64 {
	dfd, err := openPrivateDir(sealDir())
	if err != nil {
		return 0
	}
	defer unix.Close(dfd)
	return readEnded(dfd, endedName(key, check))
}

// readEnded reads a file markEnded wrote, in the directory dfd; 0 if it is
// missing or not this user's private file.
func readEnded(dfd int, name string) int64 {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return 0
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		return 0
	}
	b := make([]byte, 32)
	n, _ := unix.Read(fd, b)
	v, err := strconv.ParseInt(strings.TrimSpace(string(b[:max(n, 0)])), 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// jobMono is the MONO field of a token without its seal, 0 if unreadable.
func jobMono(base string) int64 {
	f := strings.Split(base, ".")
	if len(f) != 6 {
		return 0
	}
	v, _ := strconv.ParseInt(f[2], 10, 64)
	return v
}
