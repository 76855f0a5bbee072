//go:build linux

package cmdline

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// genCommand is the hidden `leaderrun gen man|bash|zsh`: the man page and
// shell completions, generated from this very CLI definition so they never
// drift from it. The packages ship its output.
func genCommand() *cli.Command {
	return &cli.Command{
		Name:         "gen",
		Hidden:       true,
		Usage:        "print the man page or a shell completion script",
		ArgsUsage:    "man|bash|zsh",
		Before:       divertDoubleDash,
		OnUsageError: divertUsageError,
		Action: func(c *cli.Context) error {
			var out string
			switch what := c.Args().First(); what {
			case "man":
				var err error
				if out, err = manPage(c.App); err != nil {
					return usage(fmt.Errorf("render man page: %w", err))
				}
			case "bash":
				out = bashCompletion()
			case "zsh":
				out = zshCompletion()
			default:
				return usage(errors.New("gen needs one of man, bash or zsh"))
			}
			_, err := os.Stdout.WriteString(out)
			return err
		},
	}
}

// manPage renders leaderrun(1) from the app: the options, their groups,
// defaults and variables come from the same flag definitions as --help;
// the prose sections say what an operator needs beyond them.
func manPage(app *cli.App) (string, error) {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w(".TH LEADERRUN 1 \"\" \"leaderrun %s\" \"User Commands\"\n", roffText(buildVersion()))
	w(".SH NAME\nleaderrun \\- run a command only while this host leads a key\n")

	w(".SH SYNOPSIS\n")
	for i, syn := range synopses {
		if i > 0 {
			w(".br\n")
		}
		w("%s\n", roffSynopsis(syn))
	}

	w(".SH DESCRIPTION\n")
	for i, p := range manDescription() {
		if i > 0 {
			w(".PP\n")
		}
		w("%s\n", roffText(p))
	}

	w(".SH OPTIONS\n")
	writeManOptions(&b, app.Flags)

	w(".SH COMMANDS\n")
	for _, cmd := range app.Commands {
		if cmd.Hidden {
			continue
		}
		w(".SS %s\n%s\n", roffText(cmd.UsageText), roffText(cmd.Description))
		var own []cli.Flag
		for _, f := range cmd.Flags {
			if !slices.ContainsFunc(app.Flags, func(g cli.Flag) bool { return g.Names()[0] == f.Names()[0] }) {
				own = append(own, f)
			}
		}
		if len(own) > 0 {
			w(".PP\nIts own options (the backend options above apply too):\n")
			for _, d := range visibleFlags(own) {
				writeManFlag(&b, d)
			}
		}
	}

	for _, sec := range manSections {
		w(".SH %s\n", sec.title)
		for i, p := range sec.paras {
			switch {
			case strings.HasPrefix(p, "  "):
				w(".PP\n.nf\n.RS 4\n%s\n.RE\n.fi\n", roffText(strings.TrimPrefix(p, "  ")))
			case strings.HasPrefix(p, "* "):
				tag, text, _ := strings.Cut(strings.TrimPrefix(p, "* "), "\t")
				w(".TP\n.B %s\n%s\n", roffText(tag), roffText(text))
			default:
				if i > 0 {
					w(".PP\n")
				}
				w("%s\n", roffText(p))
			}
		}
	}
	return b.String(), nil
}

// writeManOptions prints the grouped options as .SS sections.
func writeManOptions(b *strings.Builder, flags []cli.Flag) {
	titles, groups := groupFlags(visibleFlags(flags))
	for _, title := range titles {
		fmt.Fprintf(b, ".SS %s\n", roffText(title))
		if note := categoryNote[title]; note != "" {
			fmt.Fprintf(b, "Rule: %s.\n", roffText(note))
		}
		for _, d := range groups[title] {
			writeManFlag(b, d)
		}
	}
}

// writeManFlag is one option as a tagged paragraph.
func writeManFlag(b *strings.Builder, d flagDoc) {
	names := []string{`\fB` + roffText(d.Name) + `\fR`}
	for _, a := range d.Aliases {
		names = append(names, `\fB`+roffText(a)+`\fR`)
	}
	head := strings.Join(names, ", ")
	if d.Arg != "" {
		head += ` \fI` + roffText(d.Arg) + `\fR`
	}
	fmt.Fprintf(b, ".TP\n%s\n%s\n", head, roffText(d.describe()))
}

// roffSynopsis sets a synopsis line for roff: what is typed as it stands
// in bold (leaderrun, the command, options), what is replaced in italics
// (KEY, options), the brackets and bars plain.
func roffSynopsis(syn string) string {
	word := regexp.MustCompile(`-{0,2}[A-Za-z][A-Za-z0-9-]*|--`)
	return word.ReplaceAllStringFunc(syn, func(w string) string {
		if w == "options" || w == strings.ToUpper(w) && !strings.HasPrefix(w, "-") {
			return `\fI` + roffText(w) + `\fR`
		}
		return `\fB` + roffText(w) + `\fR`
	})
}

// roffText escapes text for roff: backslashes, dashes (so options can be
// searched for and copied), and a leading dot or quote.
func roffText(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, ".") || strings.HasPrefix(line, "'") {
			line = `\&` + line
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// manDescription is the DESCRIPTION of leaderrun(1), one paragraph each.
func manDescription() []string {
	return []string{
		"leaderrun campaigns for KEY on " + backendTitles() + ". Once this host leads, " +
			"it starts COMMAND with LEADER_EPOCH, LEADER_KEY and LEADER_ID in its environment, renews " +
			"the lease, and stops all of the command (its process group and everything it started) " +
			"before its local deadline: the moment each successful renewal was sent plus the TTL, on " +
			"the monotonic clock. Leadership is released only once the command is gone, so a standby " +
			"never starts while any process of the old one runs.",
		"LEADER_EPOCH is a fencing token: it is greater than every epoch granted before for KEY. " +
			"A lease alone cannot give mutual exclusion (a host frozen past its TTL wakes believing " +
			"it leads), so pass the epoch to what the command writes to, or run " +
			"\"leaderrun check || exit 1\" before each step that must not run twice.",
		keyRule,
		dashRule,
		"A dead-man guard process kills the command at its kill point if leaderrun itself is frozen, " +
			"and at once if leaderrun dies, then releases the lease.",
		"The design, and which promise each part keeps, is described in DESIGN.md in " +
			docsDir + ".",
	}
}

// docsDir is where the packages put README.md and DESIGN.md: the .deb
// gzips them (Debian policy), the .rpm does not.
const docsDir = "/usr/share/doc/leaderrun/ (compressed as .gz on Debian)"

// manSections follow OPTIONS and COMMANDS. A paragraph starting with two
// spaces is a literal example; "* TAG\tTEXT" is a tagged paragraph.
var manSections = []struct {
	title string
	paras []string
}{
	{"EXIT STATUS", []string{
		"* the command's code\tThe command exited on its own (with --restart never), or after a graceful stop.",
		"* 123\tLeadership was lost; the command was stopped.",
		"* 124\tNot leader within --acquire-timeout, or --no-wait while another holder leads.",
		"* 125\tleaderrun's own failure: usage, configuration, or the backend refused (ACL, authentication, TLS).",
		"* 126\tThe command was found but cannot be executed (a directory, no permission).",
		"* 127\tThe command, or the interpreter on its #! line, was not found.",
		"* 128+N\tThe command was ended by signal N.",
		"leaderrun check exits 0 while epoch N leads KEY, 1 when it does not (stderr names the " +
			"current holder and epoch) or has less than --min-remaining left, and 125 on error. leaderrun status exits 0, also when nobody leads, 3 when the key was never used where it looked, 125 on error; status --watch exits 0 on SIGINT or SIGTERM, 125 only for bad input.",
	}},
	{"ENVIRONMENT", []string{
		"Every option can also be set in the environment as LEADERRUN_ followed by the option's " +
			"name in capitals with dashes as underscores (LEADERRUN_KILL_GRACE for --kill-grace, " +
			"LEADERRUN_JSON for status --json, LEADERRUN_EPOCH for check --epoch), except " +
			noEnvText() + ". An option with variables in brackets under OPTIONS reads those too, " +
			"and where several are set the first in brackets wins, LEADERRUN_<OPTION> coming last " +
			"unless they name it: for backend options the brackets hold the backend's own " +
			"(CONSUL_HTTP_ADDR, ETCDCTL_ENDPOINTS, ...) or the one leaderrun gives its command, so " +
			"that leaderrun check in the command reads what the run used. An option given on the " +
			"command line wins over the environment; files named by --env-file (LEADERRUN_ENV_FILE, " +
			"a comma-separated list) or --unit override the inherited environment.",
		"The command gets leaderrun's environment plus:",
		"* LEADER_EPOCH\tthe epoch of this leadership, the fencing token;",
		"* LEADER_RUN_ID\tthe idempotency key of this run: with --once-per or --run-id the slot's id, the same on every retry of the slot; otherwise 32 hex digits, new at each start of the command;",
		"* LEADERRUN_DEADLINE_FILE\twhere leaderrun keeps its current stop point (CLOCK_MONOTONIC), which leaderrun check --min-remaining reads inside the job;",
		"* LEADER_KEY, LEADER_ID\tthe key and this candidate's name;",
		"* LEADERRUN_BACKEND, LEADERRUN_PREFIX\tso that leaderrun check needs no options;",
		"* backend addresses\tCONSUL_HTTP_ADDR, CONSUL_CACERT, CONSUL_CLIENT_CERT, CONSUL_CLIENT_KEY, " +
			"CONSUL_TLS_SERVER_NAME, CONSUL_DATACENTER; ETCDCTL_ENDPOINTS, ETCDCTL_CACERT, ETCDCTL_CERT, " +
			"ETCDCTL_KEY; LEADERRUN_LOCK_DIR when --lock-dir was given. Tokens and passwords given " +
			"by option are never added.",
		"NOTIFY_SOCKET, WATCHDOG_* and LEADERRUN_ENV_FILE (its settings are in the environment already) " +
			"are removed from the command's environment.",
	}},
	{"FILES", []string{
		"* /etc/leaderrun/leaderrun.env\tsettings shared by every instance of leaderrun@.service, read first;",
		"* /etc/leaderrun/KEY.env\tthe settings of leaderrun@KEY.service, LEADERRUN_COMMAND among them. " +
			"Both may hold tokens: keep them mode 0600.",
		"* /usr/share/leaderrun/example.env\ta commented example to copy.",
		"* /var/lib/leaderrun, /var/tmp/leaderrun-UID\tthe local backend's epoch counters, of root and of " +
			"anyone else; /usr/lib/tmpfiles.d/leaderrun.conf keeps systemd-tmpfiles from ageing them out.",
	}},
	{"EXAMPLES", []string{
		"Run a nightly job once a day across several hosts, from the same crontab line on each " +
			"(-q: cron mails only when something went wrong; a host that finds the day's run done " +
			"exits 0); it is a single crontab line:",
		"  " + examples[0],
		"Run a daemon under systemd on whichever host leads \"billing\":",
		"  install -m 600 /usr/share/leaderrun/example.env /etc/leaderrun/billing.env\n" +
			"$EDITOR /etc/leaderrun/billing.env\n" +
			examples[1] + "\n" +
			"leaderrun status --unit billing",
		"Run a legacy script on one host at a time:",
		"  " + examples[2],
		"and let the script stop a step when this host no longer leads:",
		"  #!/bin/sh\nset -e\n" + examples[3] + "\nexport-invoices\n" + examples[3] + "\ncharge-cards",
	}},
	{"SEE ALSO", []string{
		"systemctl(1), systemd.service(5), systemd.exec(5), flock(1), timeout(1), consul(1), etcdctl(1); " +
			"README.md and DESIGN.md in " + docsDir + ".",
	}},
}

// bashCompletion asks leaderrun itself (urfave/cli's
// --generate-bash-completion) for subcommands and flags. After "--" the
// words belong to the wrapped command and get its own completion.
func bashCompletion() string {
	return `# bash completion for leaderrun                    -*- shell-script -*-
# Generated by "leaderrun gen bash"; subcommands and flags come from the
# binary itself, so this script never goes stale.

_leaderrun() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} i

	# Everything after "--" is the command leaderrun runs.
	for ((i = 1; i < COMP_CWORD; i++)); do
		if [[ ${COMP_WORDS[i]} == -- ]]; then
			if declare -F _command_offset >/dev/null; then
				_command_offset $((i + 1))
			else
				mapfile -t COMPREPLY < <(compgen -c -- "$cur" | sort -u)
			fi
			return 0
		fi
	done

	# Options that name a file or a directory.
	case $prev in
	--lock-dir)
		mapfile -t COMPREPLY < <(compgen -d -- "$cur")
		return 0
		;;
	--consul-token-file | --consul-ca-file | --consul-client-cert | --consul-client-key | \
		--etcd-cacert | --etcd-cert | --etcd-key | --etcd-password-file | --zk-auth-file | --env-file)
		mapfile -t COMPREPLY < <(compgen -f -- "$cur")
		return 0
		;;
	--backend)
		mapfile -t COMPREPLY < <(compgen -W "` + strings.Join(backendNames(), " ") + `" -- "$cur")
		return 0
		;;
	--restart)
		mapfile -t COMPREPLY < <(compgen -W "never on-failure always" -- "$cur")
		return 0
		;;
	--on-lost)
		mapfile -t COMPREPLY < <(compgen -W "exit rejoin" -- "$cur")
		return 0
		;;
	--log-format)
		mapfile -t COMPREPLY < <(compgen -W "text json" -- "$cur")
		return 0
		;;
	--log-level)
		mapfile -t COMPREPLY < <(compgen -W "trace debug info warn error off" -- "$cur")
		return 0
		;;
	esac

	# Ask leaderrun: the words so far (plus the current one when it is a
	# flag prefix, so that flags are listed) and the completion flag.
	local -a ask=("${COMP_WORDS[@]:1:COMP_CWORD-1}")
	[[ $cur == -* ]] && ask+=("$cur")
	local words
	words=$("${COMP_WORDS[0]}" "${ask[@]}" --generate-bash-completion 2>/dev/null) || return 0
	mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
}

complete -o default -F _leaderrun leaderrun
`
}

// zshCompletion does the same for zsh: leaderrun lists its subcommands and
// flags; after "--" zsh completes the wrapped command normally.
func zshCompletion() string {
	return `#compdef leaderrun
# zsh completion for leaderrun. Generated by "leaderrun gen zsh";
# subcommands and flags come from the binary itself.

_leaderrun() {
	local i
	local -a ask candidates

	# Everything after "--" is the command leaderrun runs.
	for ((i = 2; i < CURRENT; i++)); do
		if [[ ${words[i]} == -- ]]; then
			shift $i words
			(( CURRENT -= i ))
			_normal
			return
		fi
	done

	case ${words[CURRENT-1]} in
	--lock-dir) _directories; return ;;
	--consul-token-file|--consul-ca-file|--consul-client-cert|--consul-client-key|--etcd-cacert|--etcd-cert|--etcd-key|--etcd-password-file|--zk-auth-file|--env-file)
		_files; return ;;
	--backend) compadd ` + strings.Join(backendNames(), " ") + `; return ;;
	--restart) compadd never on-failure always; return ;;
	--on-lost) compadd exit rejoin; return ;;
	--log-format) compadd text json; return ;;
	--log-level) compadd trace debug info warn error off; return ;;
	esac

	ask=("${(@)words[2,CURRENT-1]}")
	[[ ${words[CURRENT]} == -* ]] && ask+=("${words[CURRENT]}")
	candidates=("${(@f)$(${words[1]} "${(@)ask}" --generate-bash-completion 2>/dev/null)}")
	candidates=("${(@)candidates:#}")
	(( ${#candidates} )) && compadd -a candidates || _files
}

if [[ $funcstack[1] == _leaderrun ]]; then
	# Autoloaded from $fpath: this file is the function body; complete now.
	_leaderrun "$@"
else
	compdef _leaderrun leaderrun
fi
`
}
