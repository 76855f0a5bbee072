package zookeeper

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/hashicorp/go-hclog"

	"github.com/leaderrun/leaderrun/locker"
	"github.com/leaderrun/leaderrun/locker/records"
	"github.com/leaderrun/leaderrun/locker/zookeeper/zkwire"
)

// DefaultServer is used when Config.Servers is empty, as zkCli.sh does.
const DefaultServer = zkwire.DefaultServer

// DefaultPrefix is used when Options.Prefix is empty.
const DefaultPrefix = "leaderrun"

// defaultDialTimeout applies when Config.DialTimeout is zero.
const defaultDialTimeout = zkwire.DefaultTimeout

// Config configures a ZooKeeper Locker.
type Config struct {
	locker.Options

	// Servers are host:port pairs; the client fails over between them. As
	// in ZooKeeper's connect strings, the last may end in a chroot path
	// ("zk1:2181,zk2:2181/apps"). Empty means DefaultServer.
	Servers []string

	// Chroot is a znode path under which leaderrun works ("/apps/prod");
	// it may also be given at the end of Servers, not both.
	Chroot string

	// Auth is "user:password" for ZooKeeper's digest scheme. With it, every
	// znode leaderrun creates is readable and writable by that user only
	// (CREATOR_ALL_ACL); without it, by anyone (OPEN_ACL_UNSAFE).
	Auth string

	// DialTimeout bounds establishing a session and each call Acquire and
	// Leader make on their own. Zero means 5s.
	DialTimeout time.Duration

	// Logger receives debug lines and warnings; nil discards them.
	Logger hclog.Logger

	// SafetyMargin is the supervisor's --safety-margin. When set, the first
	// Acquire warns if it is not above half the ensemble's tickTime, which
	// is how early a standby may lead (DESIGN §1.2). Zero checks nothing.
	SafetyMargin time.Duration
}

// Locker campaigns for one key in ZooKeeper. It implements locker.Locker.
// Each campaign has a session of its own, so that a lost or released
// leadership never leaves anything behind in the next one; Leader and
// ReleaseHandle share one more session, opened on first use.
type Locker struct {
	// Core implements locker.Controls, locker.History and locker.RunLog
	// on the Locker's records.Store (records.go).
	*records.Core

	opts    locker.Options
	dir     string // /<chroot>/<prefix>/<key>
	servers []string
	auth    string
	acl     []zk.ACL
	timeout time.Duration
	log     hclog.Logger

	reader session // for Leader and ReleaseHandle, see session.go

	ctlWatch controlWatch // WaitControl's watch, see records.go

	margin     time.Duration // Config.SafetyMargin
	marginOnce sync.Once     // checkMargin runs on the first campaign only
	relay      relayBound    // set by checkMargin

	silent     silence // predecessors gone without a release (silent.go)
	maxSession struct {
		mu sync.Mutex
		d  time.Duration // the ensemble's maxSessionTimeout, once learned
	}

	// onWake, when set by a test, is called each time a waiting candidate
	// wakes from watching its predecessor.
	onWake func()
}

var _ locker.Locker = (*Locker)(nil)

// New validates cfg and returns a Locker. It does not contact ZooKeeper. A
// configuration that can never work yields a *locker.ConfigError.
func New(cfg Config) (*Locker, error) {
	refuse := func(field, format string, args ...any) (*Locker, error) {
		return nil, &locker.ConfigError{Field: field, Rule: fmt.Sprintf(format, args...)}
	}
	opts := cfg.Options
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if err := opts.ValidateName(); err != nil {
		return refuse("Key", "%v", err)
	}
	if err := locker.ValidatePrefix(opts.Prefix); err != nil {
		return refuse("Prefix", "%v", err)
	}
	if opts.TTL <= 0 {
		return refuse("TTL", "must be positive, got %s", opts.TTL)
	}
	if opts.TTL > time.Duration(1<<31-1)*time.Millisecond {
		return refuse("TTL", "must fit a ZooKeeper session timeout (under 24 days), got %s", opts.TTL)
	}
	if opts.ID == "" {
		host, _ := os.Hostname()
		opts.ID = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	servers, chroot, err := zkwire.SplitServers(cfg.Servers)
	if err != nil {
		return refuse("Servers", "%v", err)
	}
	if cfg.Chroot != "" {
		if chroot != "" {
			return refuse("Chroot", "is also given at the end of the servers (%s); give it once", chroot)
		}
		chroot = cfg.Chroot
	}
	if err := validateChroot(chroot); err != nil {
		return refuse("Chroot", "%v", err)
	}
	l := &Locker{
		opts:    opts,
		dir:     chroot + "/" + opts.Prefix + "/" + opts.Name(),
		servers: servers,
		auth:    cfg.Auth,
		acl:     zk.WorldACL(zk.PermAll),
		timeout: cfg.DialTimeout,
		log:     cfg.Logger,
		margin:  cfg.SafetyMargin,
	}
	if l.auth != "" {
		if user, pass, ok := strings.Cut(l.auth, ":"); !ok || user == "" || pass == "" {
			return refuse("Auth", "must be user:password (ZooKeeper digest scheme)")
		}
		l.acl = zk.AuthACL(zk.PermAll)
	}
	if l.timeout <= 0 {
		l.timeout = defaultDialTimeout
	}
	if l.log == nil {
		l.log = hclog.NewNullLogger()
	}
	l.reader.l = l
	l.Core = newRecords(l)
	return l, nil
}

// validateChroot accepts "" or an absolute znode path without a trailing
// slash, empty, "." or ".." segments.
func validateChroot(chroot string) error {
	if chroot == "" {
		return nil
	}
	if !strings.HasPrefix(chroot, "/") || chroot == "/" || strings.HasSuffix(chroot, "/") {
		return fmt.Errorf("%q must be an absolute znode path such as /apps/prod, without a trailing /", chroot)
	}
	for _, seg := range strings.Split(chroot[1:], "/") {
		if seg == "" || seg == "." || seg == ".." || strings.ContainsAny(seg, "\x00@") {
			return fmt.Errorf("%q has an empty, \".\", \"..\" or invalid segment", chroot)
		}
	}
	return nil
}
