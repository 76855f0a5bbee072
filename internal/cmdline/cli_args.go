//go:build linux

package cmdline

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/urfave/cli/v2"

	"github.com/leaderrun/leaderrun/locker"
)

// argsKey is where the app keeps the raw command line it was run with.
const argsKey = "args"

// rawArgs is the command line runApp was given, program name first.
func rawArgs(c *cli.Context) []string {
	args, _ := c.App.Metadata[argsKey].([]string)
	return args
}

// divertDoubleDash makes `leaderrun [options] -- status ...` run a program
// named status, as `--` promises, instead of this subcommand: urfave/cli
// picks a subcommand by the first argument even after `--`.
func divertDoubleDash(c *cli.Context) error {
	root := rootContext(c)
	if !afterDoubleDash(root) {
		return nil
	}
	if err := runAction(root); err != nil {
		return err
	}
	return exitCode(0)
}

// divertUsageError is divertDoubleDash for arguments this subcommand could
// not parse as its own flags; a real usage error is one line and 125.
func divertUsageError(c *cli.Context, err error, _ bool) error {
	if root := rootContext(c); afterDoubleDash(root) {
		if err := runAction(root); err != nil {
			return err
		}
		return exitCode(0)
	}
	return usageError(c, err)
}

// rootContext is the context of the top-level command line.
func rootContext(c *cli.Context) *cli.Context {
	lineage := c.Lineage()
	for i := len(lineage) - 1; i >= 0; i-- {
		if lineage[i].Command != nil {
			return lineage[i]
		}
	}
	return c
}

// afterDoubleDash reports whether the top-level flags ended with "--", so
// that the first remaining argument is a command to run. The flag parser
// drops the "--"; the raw command line still shows it.
func afterDoubleDash(root *cli.Context) bool {
	args := rawArgs(root)
	if len(args) < 1 {
		return false
	}
	raw := args[1:]
	n := len(raw) - root.NArg()
	return n >= 1 && n <= len(raw) && raw[n-1] == "--"
}

// givenOnCommandLine reports whether flag was typed on this command's
// line (not only set by the environment).
func givenOnCommandLine(c *cli.Context, flag string) bool {
	for _, name := range c.LocalFlagNames() {
		if name == flag {
			return true
		}
	}
	return false
}

// flagErrorPatterns match the errors of Go's flag package and urfave/cli,
// reworded below.
type flagErrorPatterns struct {
	badValue, badBool, badEnv, badEnvGen, undefined, needsArg, number *regexp.Regexp
}

// flagErrors compiles the patterns on first use: most runs read a valid
// command line, and what package init builds every process keeps.
var flagErrors = sync.OnceValue(func() *flagErrorPatterns {
	return &flagErrorPatterns{
		badValue:  regexp.MustCompile(`^invalid value "(.*)" for flag -([\w-]+): (.*)$`),
		badBool:   regexp.MustCompile(`^invalid boolean value "(.*)" for -([\w-]+): (.*)$`),
		badEnv:    regexp.MustCompile(`^could not parse "(.*)" as (\w+) value from environment variable "(\w+)" for flag ([\w-]+): (.*)$`),
		badEnvGen: regexp.MustCompile(`^could not parse "(.*)" from environment variable "(\w+)" as value for flag ([\w-]+): (.*)$`),
		undefined: regexp.MustCompile(`^flag provided but not defined: -+([\w-]+)$`),
		needsArg:  regexp.MustCompile(`^flag needs an argument: -+([\w-]+)$`),
		number:    regexp.MustCompile(`^[0-9.]+$`),
	}
})

// flagError rewords the parser's errors the way an operator reads them:
// flags with their double dash, and what a valid value looks like.
func flagError(err error) error {
	if err == nil {
		return nil
	}
	msg, re := err.Error(), flagErrors()
	switch m := matchAny(msg); {
	case m.re == nil:
	case m.re == re.badValue:
		return errors.New(badValue("--"+m.sub[2], m.sub[1], m.sub[3]))
	case m.re == re.badBool:
		return fmt.Errorf("--%s takes no value (or true/false), got %q", m.sub[2], m.sub[1])
	case m.re == re.badEnv:
		return errors.New(badValue(m.sub[3]+"="+m.sub[1]+" (--"+m.sub[4]+")", m.sub[1], m.sub[2]+" "+m.sub[5]))
	case m.re == re.badEnvGen:
		return errors.New(badValue(m.sub[2]+"="+m.sub[1]+" (--"+m.sub[3]+")", m.sub[1], m.sub[4]))
	case m.re == re.undefined:
		return fmt.Errorf("unknown option --%s (leaderrun help all lists them)", m.sub[1])
	case m.re == re.needsArg:
		return fmt.Errorf("--%s needs a value", m.sub[1])
	}
	return err
}

type match struct {
	re  *regexp.Regexp
	sub []string
}

func matchAny(msg string) match {
	re := flagErrors()
	for _, re := range []*regexp.Regexp{re.badValue, re.badBool, re.badEnv, re.badEnvGen, re.undefined, re.needsArg} {
		if sub := re.FindStringSubmatch(msg); sub != nil {
			return match{re, sub}
		}
	}
	return match{}
}

// badValue says why value is not valid for flag; kind is the parser's
// word for the type or its error. subject is "--ttl" on the command line,
// "LEADERRUN_TTL=5 (--ttl)" from the environment.
func badValue(subject, value, kind string) string {
	if !strings.Contains(subject, "=") {
		subject += " " + strconv.Quote(value)
		if flagErrors().number.MatchString(value) {
			subject = strings.Trim(subject, `"`)
		}
	}
	f := flagOf(subject)
	if g, ok := f.(*cli.GenericFlag); ok {
		if _, ok := g.Value.(*periodValue); ok {
			return fmt.Sprintf("%s: not a period; write it %s", subject, periodFormat)
		}
	}
	if _, ok := f.(*cli.DurationFlag); ok || strings.Contains(kind, "duration") {
		if flagErrors().number.MatchString(value) {
			return fmt.Sprintf("%s: a duration needs a unit, as in %ss or %sm", strings.ReplaceAll(subject, `"`, ""), value, value)
		}
		return fmt.Sprintf("%s: not a duration; write it as 5s, 2m or 1h30m", subject)
	}
	switch f.(type) {
	case *cli.Uint64Flag, *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag:
		return fmt.Sprintf("%s: not a whole number", subject)
	}
	return fmt.Sprintf("%s: not a valid value", subject)
}

// flagOf is the flag a subject ("--ttl 5", "VAR=5 (--ttl)") names, or nil.
func flagOf(subject string) cli.Flag {
	_, name, ok := strings.Cut(subject, "--")
	if !ok {
		return nil
	}
	name = strings.TrimRight(strings.Fields(name)[0], ")")
	for _, f := range allFlags() {
		if f.Names()[0] == name {
			return f
		}
	}
	return nil
}

// allFlags are every flag of every command, for looking up a flag's type.
func allFlags() []cli.Flag {
	return slices.Concat(backendFlags(), runFlags(), onceFlags(), queryFlags(), historyFlags(), commonFlags(), []cli.Flag{epochFlag()})
}

// helpCommand is `leaderrun help [COMMAND]`. It is hidden from the command
// list (and completion) because --help shows it in the synopsis.
func helpCommand() *cli.Command {
	return &cli.Command{
		Name:      "help",
		Hidden:    true,
		Usage:     "show help for leaderrun or one command",
		ArgsUsage: "[all|COMMAND|BACKEND]",
		Before:    divertDoubleDash,
		// `leaderrun help <TAB>` offers help's topics, not help's own
		// help subcommand urfave/cli would list.
		BashComplete: func(c *cli.Context) {
			if c.NArg() > 0 {
				return // help takes one topic
			}
			for _, t := range helpTopics(c.App) {
				fmt.Println(t)
			}
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 1 {
				return usage(fmt.Errorf("help takes one command name, got %q", c.Args().Slice()))
			}
			name := c.Args().First()
			switch {
			case name == "":
				writeAppHelp(os.Stdout, c.App)
				return nil
			case name == "all":
				writeFullHelp(os.Stdout, c.App)
				return nil
			case backendNamed(name) != nil:
				writeBackendHelp(os.Stdout, backendNamed(name))
				return nil
			}
			for _, cmd := range c.App.Commands {
				if cmd.Name == name && !cmd.Hidden {
					writeCommandHelp(os.Stdout, cmd)
					return nil
				}
			}
			topics := helpTopics(c.App)
			msg := fmt.Sprintf("help: no command or backend %q; help knows %s", name, strings.Join(topics, ", "))
			if near := nearest(name, topics); near != "" {
				msg = fmt.Sprintf("help: no command or backend %q; did you mean %q?", name, near)
			}
			return usage(errors.New(msg))
		},
	}
}

// helpTopics are what help shows: all, each command, each backend.
func helpTopics(app *cli.App) []string {
	topics := []string{"all"}
	for _, cmd := range app.Commands {
		if !cmd.Hidden {
			topics = append(topics, cmd.Name)
		}
	}
	return append(topics, backendNames()...)
}

// versionCommand is `leaderrun version`, the same line as --version.
func versionCommand() *cli.Command {
	return &cli.Command{
		Name:        "version",
		Usage:       "print the version",
		UsageText:   "leaderrun version",
		Description: "Prints leaderrun's version, the commit it was built from, the Go version and the platform.",
		Before:      divertDoubleDash,
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usage(fmt.Errorf("version takes no arguments, got %q", c.Args().First()))
			}
			fmt.Print(versionLine())
			return nil
		},
	}
}

// fieldFlags maps the fields a library names in a *locker.ConfigError to
// the flags an operator types; a backend's own fields (backend.Fields)
// win over these.
var fieldFlags = map[string]string{
	"Key": "--key", "Options.Key": "--key", "Options.Prefix": "--prefix", "Prefix": "--prefix", "ID": "--id", "TTL": "--ttl",
	"RenewInterval": "--renew-interval", "KillGrace": "--kill-grace", "SafetyMargin": "--safety-margin",
	"StopSignal": "--stop-signal", "AcquireTimeout": "--acquire-timeout", "Restart": "--restart",
	"RestartDelay": "--restart-delay", "OnLost": "--on-lost", "HTTPAddr": "--http-addr",
	"ReadyTimeout": "--ready-timeout", "JobWatchdog": "--job-watchdog",
}

// configError words a setting a library refused with the flag the operator
// typed: "--ttl must be at least 10s on Consul, got 5s". A local file
// error (the lock directory) is said as what it is, not as a refusal by a
// remote backend.
func (cfg *runConfig) configError(err error) error { return configError(cfg.backend, err) }

// configError is runConfig.configError for backend b.
func configError(b *backend, err error) error {
	var ce *locker.ConfigError
	if errors.As(err, &ce) {
		flag, ok := b.Fields[ce.Field]
		if !ok {
			flag, ok = fieldFlags[ce.Field]
		}
		if !ok {
			flag = ce.Field
		}
		// A rule may name other fields too ("RenewInterval + ... < TTL").
		rule := ce.Rule
		for field, f := range fieldFlags {
			if !strings.Contains(field, ".") {
				rule = regexp.MustCompile(`\b`+field+`\b`).ReplaceAllString(rule, f)
			}
		}
		msg := rule
		if !strings.Contains(rule, flag) {
			msg = flag + " " + rule
		}
		if ce.Err != nil {
			msg += ": " + ce.Err.Error()
		}
		return errors.New(msg)
	}
	var pe *fs.PathError
	if b.FileFlag != "" && errors.As(err, &pe) {
		return fmt.Errorf("%s: cannot %s %s: %w", b.FileFlag, pe.Op, pe.Path, pe.Err)
	}
	return err
}

// interspersedCommands are the commands whose options may follow their
// KEY, as their synopsis shows.
var interspersedCommands = []string{"status", "history", "check", "step-down", "pause", "resume"}

// interspersed puts a command line in the order the parser reads: the
// options given before a command (`leaderrun --backend etcd status KEY`)
// after the command's name, where they are its own, and the options a
// command of interspersedCommands gives after its KEY in front of that
// KEY, with a "--" between them and the KEY. urfave/cli, as Go's flag
// package, stops reading options at the first other argument, so
// `leaderrun pause billing --reason x` would take --reason for a second
// KEY; and options before a command belong to the run's flag set, where
// the command never saw them (status asked the default backend). An
// option given before a command that the command does not take is
// refused, never dropped. Nothing after a "--" the line has itself is
// moved (there every word is an argument, as in `leaderrun --key k --
// status`), nor anything of a run or a hidden command, nor a line the
// shell completion asks about (it must end in the completion flag).
func interspersed(args []string, app *cli.App) ([]string, error) {
	if len(args) < 2 || args[len(args)-1] == "--generate-bash-completion" {
		return args, nil
	}
	for i := 1; i < len(args); i++ {
		arg := args[i]
		switch {
		case arg == "--":
			return args, nil
		case isOption(arg):
			if takesValue(app.Flags, arg) {
				i++
			}
			continue
		}
		var cmd *cli.Command
		for _, c := range app.Commands {
			if c.Name == arg && !c.Hidden {
				cmd = c
			}
		}
		if cmd == nil {
			return args, nil
		}
		before := args[1:i]
		for j := 0; j < len(before); j++ {
			if !isOption(before[j]) {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimLeft(before[j], "-"), "=")
			if !hasFlag(cmd, name) {
				return nil, fmt.Errorf("%s takes no --%s: the options before it are its own (leaderrun help %s lists them)", cmd.Name, name, cmd.Name)
			}
		}
		rest := slices.Concat(before, args[i+1:])
		if slices.Contains(interspersedCommands, cmd.Name) {
			rest = reorder(rest, cmd.Flags)
		}
		return slices.Concat(args[:1], []string{cmd.Name}, rest), nil
	}
	return args, nil
}

// hasFlag reports whether cmd takes the option name (help always).
func hasFlag(cmd *cli.Command, name string) bool {
	if name == "help" || name == "h" {
		return true
	}
	for _, f := range cmd.Flags {
		if slices.Contains(f.Names(), name) {
			return true
		}
	}
	return false
}

// reorder puts the options of rest (with their values) first, then "--"
// and the other arguments, in their order.
func reorder(rest []string, flags []cli.Flag) []string {
	var opts, others []string
	for j := 0; j < len(rest); j++ {
		arg := rest[j]
		switch {
		case arg == "--":
			others = append(others, rest[j+1:]...)
			j = len(rest)
		case isOption(arg):
			opts = append(opts, arg)
			if takesValue(flags, arg) && j+1 < len(rest) {
				j++
				opts = append(opts, rest[j])
			}
		default:
			others = append(others, arg)
		}
	}
	if len(others) == 0 {
		return opts
	}
	return slices.Concat(opts, []string{"--"}, others)
}

// isOption reports whether arg is an option rather than an argument ("-"
// alone is an argument, as for the flag package).
func isOption(arg string) bool { return len(arg) > 1 && arg[0] == '-' }

// takesValue reports whether the option arg names takes its value from the
// next argument: "--ttl 5s" does, "--ttl=5s", a switch and an unknown
// option do not.
func takesValue(flags []cli.Flag, arg string) bool {
	name := strings.TrimLeft(arg, "-")
	if strings.Contains(name, "=") {
		return false
	}
	for _, f := range flags {
		if slices.Contains(f.Names(), name) {
			g, ok := f.(cli.DocGenerationFlag)
			return ok && g.TakesValue()
		}
	}
	return false
}

// usageError is the one-line refusal of a command line the flag parser
// could not read; unknown options get a suggestion from c's options.
func usageError(c *cli.Context, err error) error {
	if m := flagErrors().undefined.FindStringSubmatch(err.Error()); m != nil {
		flags, cmd := c.App.Flags, ""
		if c.Command != nil && c.Command.Name != c.App.Name {
			flags, cmd = c.Command.Flags, c.Command.Name
		}
		return usage(unknownOption(m[1], flags, cmd))
	}
	return usage(flagError(err))
}
