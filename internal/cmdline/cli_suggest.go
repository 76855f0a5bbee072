//go:build linux

package cmdline

import (
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// What an operator mistypes, and what leaderrun suggests instead: the
// nearest command or option by edit distance, or the one the word begins.

// commandNames are the words that, first after the options and without a
// "--" before them, name a command of leaderrun rather than one to run.
// They are every command the app shows, and help (a test holds them to it).
var commandNames = strings.Split(commandList, ", ")

// commandList names the commands in the order help shows them.
const commandList = "status, history, check, step-down, pause, resume, help, version"

// nearest is the candidate closest to word: at most one edit away for a
// word of up to 5 characters, two for a longer one, or the only candidate
// word begins (3 characters at least). "" when none is near.
func nearest(word string, candidates []string) string {
	if len(word) < 2 {
		return ""
	}
	limit := 1
	if len(word) > 5 {
		limit = 2
	}
	best, bestDist := "", limit+1
	for _, c := range candidates {
		if d := editDistance(word, c); d < bestDist && c != word {
			best, bestDist = c, d
		}
	}
	if best != "" {
		return best
	}
	var prefixed []string
	for _, c := range candidates {
		if len(word) >= 3 && strings.HasPrefix(c, word) {
			prefixed = append(prefixed, c)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	return ""
}

// editDistance counts the insertions, deletions, substitutions and swaps
// of two neighbouring characters that turn a into b (the optimal string
// alignment distance): "stauts" is one swap from "status".
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// unknownCommand judges a first word that is neither an option nor a
// command, with no "--" before it: nil when it is the command to run (the
// key is given and the word is no typo of a command), else the one-line
// error. A word "--" precedes is always the command to run.
func unknownCommand(word string, keyGiven bool) error {
	if near := nearest(word, commandNames); near != "" {
		return fmt.Errorf("unknown command %q; did you mean %q? (a program to run goes after --: leaderrun [options] --key KEY -- %s)",
			word, near, word)
	}
	if !keyGiven {
		return fmt.Errorf("unknown command %q: the commands are %s; a program to run goes after --: leaderrun [options] --key KEY -- %s",
			word, strings.Join(commandNames, ", "), word)
	}
	return nil
}

// optionHints answer one-letter options other tools have.
var optionHints = map[string]string{
	"v": "--version prints the version; --log-level debug logs more",
}

// unknownOption is the error for an option flags do not define: the
// nearest of them, or where the option does belong, or where the list is.
// cmd is "" for a run, else the command ("status").
func unknownOption(name string, flags []cli.Flag, cmd string) error {
	typed := "--" + name
	if len(name) == 1 {
		typed = "-" + name
	}
	if hint, ok := optionHints[name]; ok {
		return fmt.Errorf("unknown option %s (%s)", typed, hint)
	}
	var names []string
	for _, f := range flags {
		if v, ok := f.(cli.VisibleFlag); ok && !v.IsVisible() {
			continue
		}
		for _, n := range f.Names() {
			if len(n) > 1 {
				names = append(names, n)
			}
		}
	}
	if near := nearest(name, names); near != "" {
		return fmt.Errorf("unknown option %s (did you mean --%s?)", typed, near)
	}
	where := "leaderrun help all lists them"
	if cmd != "" {
		where = "leaderrun help " + cmd + " lists them"
		if slices.ContainsFunc(runOptions(), func(f cli.Flag) bool { return slices.Contains(f.Names(), name) }) {
			where = "it is an option of a run, not of " + cmd
		}
		// check and history read one slot of a key run with --holders N.
		if name == "holders" && slices.ContainsFunc(flags, func(f cli.Flag) bool { return slices.Contains(f.Names(), "slot") }) {
			where = "it is an option of a run and of status; " + cmd + " reads one slot: --slot S"
		}
	}
	return fmt.Errorf("unknown option %s (%s)", typed, where)
}
