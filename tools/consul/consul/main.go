// Command consul is the upstream Consul v1.14 agent and CLI, built from the Go
// module proxy as a library so that leaderrun's integration tests can run
// real Consul servers (and `consul lock` for comparisons).
//
// Consul cannot be fetched with `go install` because its go.mod uses replace
// directives, so this module imports the command registry instead and wires
// it to a command-line front end of its own.
package main

import (
	"fmt"
	"io"
	"log"
	"os"
	"sort"

	mcli "github.com/mitchellh/cli"

	"github.com/hashicorp/consul/command"
	"github.com/hashicorp/consul/command/cli"
	"github.com/hashicorp/consul/command/version"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// run executes one Consul sub-command and returns its exit status.
func run(args []string) int {
	// Some libraries Consul uses write through the standard logger; the agent
	// has its own logger, so stray lines would only be noise.
	log.SetOutput(io.Discard)

	ui := &cli.BasicUI{BasicUi: mcli.BasicUi{Writer: os.Stdout, ErrorWriter: os.Stderr}}
	commands := command.RegisteredCommands(ui)

	// The help text lists the commands in a stable order.
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)

	c := &mcli.CLI{
		Name:        "consul",
		Args:        args,
		Commands:    commands,
		HelpFunc:    mcli.FilteredHelpFunc(names, mcli.BasicHelpFunc("consul")),
		HelpWriter:  os.Stdout,
		ErrorWriter: os.Stderr,
	}
	// `consul -v` / `--version` should behave like `consul version`.
	if c.IsVersion() {
		return version.New(ui).Run(nil)
	}
	code, err := c.Run()
	if err != nil {
		fmt.Fprintf(os.Stderr, "consul: %v\n", err)
		return 1
	}
	return code
}
