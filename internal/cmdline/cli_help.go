//go:build linux

package cmdline

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// Help is rendered here rather than by urfave/cli's templates: options
// grouped as a reader scans them, each default once, every line within
// helpWidth columns, and the exit codes and key rule at the end. The man
// page (cmd_gen.go) is built from the same flagDoc values.
const (
	helpWidth  = 80
	helpColumn = 26 // where an option's description starts
)

func init() {
	cli.HelpFlag = &cli.BoolFlag{Name: "help", Aliases: []string{"h"}, Category: catOther, Usage: "show this help"}
	cli.HelpPrinter = printHelp
}

// printHelp replaces urfave/cli's template printer for --help.
func printHelp(w io.Writer, _ string, data any) {
	switch d := data.(type) {
	case *cli.App:
		writeAppHelp(w, d)
	case *cli.Command:
		writeCommandHelp(w, d)
	default:
		fmt.Fprintln(w, "Usage: "+synopsisRun)
	}
}

// flagDoc is one option as help and the man page show it.
type flagDoc struct {
	Name     string   // "--kill-grace"
	Aliases  []string // "-h"
	Arg      string   // placeholder of the value, "" for a switch
	Usage    string   // the description, placeholder quotes removed
	Default  string   // "" when there is nothing worth saying
	Env      []string // variables read, in order
	Category string
}

// Head is "--kill-grace DURATION" or "--help, -h".
func (d flagDoc) Head() string {
	head := strings.Join(append([]string{d.Name}, d.Aliases...), ", ")
	if d.Arg != "" {
		head += " " + d.Arg
	}
	return head
}

// EnvNote names the variables an option reads, in the order they win,
// leaving out the one of the rule every option follows (LEADERRUN_ and
// the name in capitals) where it comes last.
func (d flagDoc) EnvNote() string {
	env := d.Env
	if n := len(env); n > 0 && env[n-1] == ruleEnv(d.Name) {
		env = env[:n-1]
	}
	if len(env) == 0 {
		return ""
	}
	vars := make([]string, len(env))
	for i, v := range env {
		vars[i] = "$" + v
	}
	return "[" + strings.Join(vars, ", ") + "]"
}

// ruleEnv is the variable an option reads by the general rule.
func ruleEnv(flag string) string {
	return "LEADERRUN_" + strings.ToUpper(strings.ReplaceAll(strings.TrimPrefix(flag, "--"), "-", "_"))
}

// docFlag describes a urfave/cli flag.
func docFlag(f cli.Flag) flagDoc {
	names := f.Names()
	d := flagDoc{Name: "--" + names[0]}
	for _, a := range names[1:] {
		if len(a) == 1 {
			d.Aliases = append(d.Aliases, "-"+a)
		} else {
			d.Aliases = append(d.Aliases, "--"+a)
		}
	}
	if c, ok := f.(cli.CategorizableFlag); ok {
		d.Category = c.GetCategory()
	}
	g, ok := f.(cli.DocGenerationFlag)
	if !ok {
		return d
	}
	d.Env = g.GetEnvVars()
	d.Usage, d.Arg = unquotePlaceholder(g.GetUsage())
	if g.TakesValue() {
		if d.Arg == "" {
			d.Arg = flagArg[names[0]]
		}
		if d.Arg == "" {
			switch f.(type) {
			case *cli.DurationFlag:
				d.Arg = "DURATION"
			case *cli.IntFlag, *cli.Uint64Flag, *cli.Int64Flag, *cli.UintFlag:
				d.Arg = "N"
			default:
				d.Arg = "VALUE"
			}
		}
		switch def := g.GetDefaultText(); def {
		case "", "0s", "0", `""`:
		default:
			d.Default = strings.Trim(def, `"`)
		}
	} else if dt := defaultText(f); dt != "" {
		d.Default = dt
	}
	return d
}

// defaultText is a switch's explicit DefaultText, if any.
func defaultText(f cli.Flag) string {
	if b, ok := f.(*cli.BoolFlag); ok {
		return b.DefaultText
	}
	return ""
}

// unquotePlaceholder takes the `PLACEHOLDER` out of a usage string:
// "`FILE` holding the token" is ("FILE holding the token", "FILE").
func unquotePlaceholder(usage string) (text, arg string) {
	before, rest, ok := strings.Cut(usage, "`")
	if !ok {
		return usage, ""
	}
	arg, after, ok := strings.Cut(rest, "`")
	if !ok {
		return usage, ""
	}
	return before + arg + after, arg
}

// visibleFlags are the documented flags of a command line, in order.
func visibleFlags(flags []cli.Flag) []flagDoc {
	var out []flagDoc
	for _, f := range flags {
		if v, ok := f.(cli.VisibleFlag); ok && !v.IsVisible() {
			continue
		}
		if slices.Contains(f.Names(), "generate-bash-completion") {
			continue
		}
		out = append(out, docFlag(f))
	}
	return out
}

// groupFlags orders flags by categoryOrder, keeping their order within a
// group; flags of an unknown group come last, under their own title.
func groupFlags(docs []flagDoc) (titles []string, groups map[string][]flagDoc) {
	groups = map[string][]flagDoc{}
	for _, d := range docs {
		cat := d.Category
		if cat == "" {
			cat = catOther
		}
		if _, seen := groups[cat]; !seen && !slices.Contains(categoryOrder(), cat) {
			titles = append(titles, cat)
		}
		groups[cat] = append(groups[cat], d)
	}
	var ordered []string
	for _, c := range categoryOrder() {
		if len(groups[c]) > 0 {
			ordered = append(ordered, c)
		}
	}
	// Unknown groups go before "Other", which stays last.
	if n := len(ordered); n > 0 && ordered[n-1] == catOther {
		return append(append(ordered[:n-1:n-1], titles...), catOther), groups
	}
	return append(ordered, titles...), groups
}

// describe is an option's description with its default and variables.
func (d flagDoc) describe() string {
	text := d.Usage
	if d.Default != "" {
		text += " (default " + d.Default + ")"
	}
	if env := d.EnvNote(); env != "" {
		text += " " + env
	}
	return text
}

// writeOptions prints the grouped options.
func writeOptions(w io.Writer, flags []cli.Flag) {
	titles, groups := groupFlags(visibleFlags(flags))
	for _, title := range titles {
		fmt.Fprintf(w, "\n%s:\n", title)
		if note := categoryNote[title]; note != "" {
			fmt.Fprintf(w, "  (%s)\n", note)
		}
		for _, d := range groups[title] {
			head := "  " + d.Head()
			lines := wrap(d.describe(), helpWidth-helpColumn)
			if len(head) > helpColumn-2 {
				fmt.Fprintln(w, head)
			} else {
				first := lines[0]
				lines = lines[1:]
				fmt.Fprintf(w, "%-*s%s\n", helpColumn, head, first)
			}
			for _, l := range lines {
				fmt.Fprintf(w, "%*s%s\n", helpColumn, "", l)
			}
		}
	}
}

// wrap breaks text into lines of at most width characters at spaces.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		switch {
		case line == "":
			line = word
		case len(line)+1+len(word) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	return append(lines, line)
}

// writeParagraph prints text wrapped to the help width.
func writeParagraph(w io.Writer, text string) {
	for _, l := range wrap(text, helpWidth-1) {
		fmt.Fprintln(w, l)
	}
}

const (
	synopsisRun      = "leaderrun [options] --key KEY -- COMMAND [ARG...]"
	synopsisStatus   = "leaderrun status [KEY] [--json] [--watch] [options]"
	synopsisCheck    = "leaderrun check [KEY] [--epoch N] [options]"
	synopsisHistory  = "leaderrun history [KEY] [--json] [--limit N] [--since D] [options]"
	synopsisStepDown = "leaderrun step-down [KEY] [--to ID] [--timeout D] [options]"
	synopsisPause    = "leaderrun pause [KEY] --reason TEXT [--timeout D] [options]"
	synopsisResume   = "leaderrun resume [KEY] [options]"
	synopsisOther    = "leaderrun step-down|pause|resume KEY | help [all|BACKEND|CMD] | version"
	synopsisHelp     = "leaderrun help [all|COMMAND|BACKEND]"
	synopsisVersion  = "leaderrun version"
)

// synopses are the forms of every command, as the man page lists them.
var synopses = []string{synopsisRun, synopsisStatus, synopsisHistory, synopsisCheck,
	synopsisStepDown, synopsisPause, synopsisResume, synopsisHelp, synopsisVersion}

// summary is the help's first paragraph.
func summary() string {
	return "Runs COMMAND only while this host leads KEY in " + backendTitles() +
		", and stops all of it before the lease could pass to another host."
}

// envRule says how options map to environment variables.
func envRule() string {
	return "Environment: every option can also be set as LEADERRUN_<OPTION> " +
		"(--kill-grace: LEADERRUN_KILL_GRACE), and one with variables in brackets " +
		"as those too: where several are set, the first in brackets wins and " +
		"LEADERRUN_<OPTION> comes last unless they name it. An option on the command " +
		"line wins over the environment. " + noEnvText() + " have no variable."
}

// noEnvText names the options without a variable: "--help, --version and --unit".
func noEnvText() string {
	names := make([]string, len(noEnvFlags))
	for i, n := range noEnvFlags {
		names[i] = "--" + n
	}
	n := len(names)
	return strings.Join(names[:n-1], ", ") + " and " + names[n-1]
}

// dashRule says what a first word without "--" before it is.
const dashRule = "COMMAND: put -- before it. Without --, the first word that is not an " +
	"option names a command of leaderrun (" + commandList + "); one a typo " +
	"away from those is refused with a suggestion, and any other is run as COMMAND " +
	"when --key is given, refused when it is not."

// exitText is the exit-code summary, for help and error hints.
const exitText = "Exit status: the command's own; 123 leadership lost, command " +
	"stopped; 124 not leader in time (--acquire-timeout, --no-wait); 125 " +
	"leaderrun's own error (usage, configuration, backend refused); 126 " +
	"command not executable; 127 command or its interpreter not found; " +
	"128+N command ended by signal N."

const keyRule = "KEY: 1 to 128 of A-Z a-z 0-9 . _ / -, starting with a letter or " +
	"digit, without \"..\", \"//\" or a trailing \"/\"; the same rule holds for --prefix."

// essentials are the options `leaderrun --help` shows, in the group order
// of categoryOrder, each on one line with its default; `leaderrun help
// all` has every option with its whole description.
var essentials = []struct{ flag, brief string }{
	{"key", "the leadership KEY (required)"},
	{"backend", "where the key is kept"},
	{"once-per", "run once per PERIOD across hosts (cron)"},
	{"acquire-timeout", "give up when not leader after this long"},
	{"no-wait", "one attempt, no waiting"},
	{"ttl", "lease time"},
	{"kill-grace", "from the stop signal to SIGKILL"},
	{"restart", "never, on-failure or always"},
	{"stop-signal", "the job's first signal"},
	{"quiet", "nothing on stderr unless something went wrong"},
	{"log-level", "trace to error, or off"},
	{"env-file", "read VAR=value settings from FILE"},
}

// examples are the README's recommended lines, verbatim (a test holds
// them to it): each is one line to copy, however wide.
var examples = []string{
	"7 3 * * *  leaderrun -q --backend etcd --etcd-endpoints https://etcd1:2379 --key nightly-report --once-per 24h --acquire-timeout 2h -- /usr/local/bin/nightly-report",
	"systemctl enable --now leaderrun@billing",
	"leaderrun --backend etcd --etcd-endpoints https://etcd1:2379 --key billing -- /usr/local/bin/nightly-billing.sh",
	"leaderrun check || exit 1",
}

// examplesTitle heads --help's examples: a line broken with "\" suits a
// shell, not a crontab.
const examplesTitle = "Examples (README.md explains each; a crontab needs each on one line):"

// wrapCommand breaks a command line wider than width at single spaces,
// ending each line but the last with " \" and indenting the next ones by
// four, as a shell reads them: the lines joined again are line.
func wrapCommand(line string, width int) []string {
	const indent = "    "
	var out []string
	for prefix := ""; ; prefix = indent {
		if len(prefix)+len(line) <= width {
			return append(out, prefix+line)
		}
		cut := -1
		for i := 1; i < len(line)-1; i++ {
			if line[i] == ' ' && line[i-1] != ' ' && line[i+1] != ' ' && len(prefix)+i+2 <= width {
				cut = i
			}
		}
		if cut < 0 {
			return append(out, prefix+line) // one word wider than width
		}
		out = append(out, prefix+line[:cut]+" \\")
		line = line[cut+1:]
	}
}

// writeAppHelp is `leaderrun --help` and `leaderrun help`: one screen for
// the common case.
func writeAppHelp(w io.Writer, app *cli.App) {
	fmt.Fprintf(w, "Usage: %s\n       %s\n       %s\n       %s\n       %s\n\n", synopsisRun, synopsisStatus, synopsisHistory, synopsisCheck, synopsisOther)
	writeParagraph(w, summary())
	var docs []flagDoc
	for _, e := range essentials {
		for _, d := range visibleFlags(app.Flags) {
			if d.Name == "--"+e.flag {
				d.Usage = e.brief
				docs = append(docs, d)
			}
		}
	}
	column := 0
	for _, d := range docs {
		column = max(column, 2+len(d.Head())+2)
	}
	titles, groups := groupFlags(docs)
	fmt.Fprintln(w)
	for _, title := range titles {
		fmt.Fprintf(w, "%s:\n", title)
		for _, d := range groups[title] {
			text := d.Usage
			if d.Default != "" {
				text += " (default " + d.Default + ")"
			}
			fmt.Fprintf(w, "%-*s%s\n", column, "  "+d.Head(), text)
		}
	}
	fmt.Fprintln(w, "\n"+examplesTitle)
	for _, e := range examples {
		for _, l := range wrapCommand(e, helpWidth-2) {
			fmt.Fprintln(w, "  "+l)
		}
	}
	fmt.Fprintln(w)
	writeParagraph(w, "More: 'leaderrun help all' (every option, the environment, exit codes), "+
		"'leaderrun help BACKEND' ("+backendList()+": its options). The version: --version (there is no -v).")
}

// writeFullHelp is `leaderrun help all`: every option of a run, by group.
func writeFullHelp(w io.Writer, app *cli.App) {
	fmt.Fprintf(w, "Usage: %s\n       %s\n       %s\n       %s\n       %s\n\n", synopsisRun, synopsisStatus, synopsisHistory, synopsisCheck, synopsisOther)
	writeParagraph(w, summary())
	writeOptions(w, app.Flags)
	fmt.Fprintln(w)
	writeParagraph(w, envRule())
	fmt.Fprintln(w)
	writeParagraph(w, exitText)
	fmt.Fprintln(w)
	writeParagraph(w, keyRule)
	fmt.Fprintln(w)
	writeParagraph(w, dashRule)
}

// writeBackendHelp is `leaderrun help etcd`: that backend's options, from
// its entry in the registry.
func writeBackendHelp(w io.Writer, b *backend) {
	fmt.Fprintf(w, "Usage: leaderrun --backend %s [options] --key KEY -- COMMAND [ARG...]\n"+
		"       leaderrun status|history|check [KEY] --backend %s [options]\n\n", b.Name, b.Name)
	writeParagraph(w, "The options of "+b.Title+", for a run, status and check alike.")
	writeOptions(w, withRuleEnv(b.Flags()))
	fmt.Fprintln(w)
	writeParagraph(w, envRule())
}

// writeCommandHelp is `leaderrun help status` and `leaderrun status --help`.
func writeCommandHelp(w io.Writer, cmd *cli.Command) {
	fmt.Fprintf(w, "Usage: %s\n\n", cmd.UsageText)
	writeParagraph(w, cmd.Description)
	// The backends' own options (addresses, TLS, credentials) are the
	// same for every command; help BACKEND and help all show them.
	var flags []cli.Flag
	backendOpts := false
	for _, f := range cmd.Flags {
		c, ok := f.(cli.CategorizableFlag)
		if ok && slices.Contains(backendCategories(), c.GetCategory()) {
			backendOpts = true
			continue
		}
		flags = append(flags, f)
	}
	if !slices.ContainsFunc(flags, func(f cli.Flag) bool { return f.Names()[0] == "help" }) {
		flags = append(flags, cli.HelpFlag) // urfave/cli adds it only when the command runs
	}
	writeOptions(w, flags)
	if backendOpts {
		fmt.Fprintln(w)
		writeParagraph(w, "The backend's options (addresses, TLS, credentials) apply too: "+
			"'leaderrun help BACKEND' shows one backend's ("+strings.Join(backendNames(), ", ")+
			"), 'leaderrun help all' every option.")
	}
	fmt.Fprintln(w)
	writeParagraph(w, envRule())
	fmt.Fprintln(w)
	writeParagraph(w, keyRule)
}

// writeShortUsage is what a bare `leaderrun` prints on stderr.
func writeShortUsage(w io.Writer, missing string) {
	fmt.Fprintf(w, "leaderrun: %s\nUsage: %s\n       %s\n       %s | %s\nRun 'leaderrun --help' for the options.\n",
		missing, synopsisRun, "leaderrun status|history|check|step-down|pause|resume [KEY] [options]", synopsisHelp, strings.TrimPrefix(synopsisVersion, "leaderrun "))
}

// version and commit are set with -ldflags "-X <this package>.version=...
// -X <this package>.commit=..." by `make build` (the Makefile's
// VERSION_PKG); a plain `go build` takes the commit from Go's VCS stamp
// when it has one.
var version, commit = "", ""

// buildVersion is leaderrun's version: the release's, the module's, or
// "dev" for a plain build.
func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// versionLine is the one format of `leaderrun version` and --version:
// "leaderrun 1.2.0 (commit 1a2b3c4d5e6f, go1.26.0, linux/amd64)".
func versionLine() string {
	commit, dirty := commit, ""
	if bi, ok := debug.ReadBuildInfo(); ok && commit == "" {
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision":
				commit = s.Value[:min(len(s.Value), 12)]
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = "-dirty"
			}
		}
	}
	if commit == "" {
		commit = "unknown"
	}
	return fmt.Sprintf("leaderrun %s (commit %s%s, %s, %s/%s)\n",
		buildVersion(), commit, dirty, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
