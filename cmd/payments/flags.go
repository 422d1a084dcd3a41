package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// helpRequested is -h or --help: dispatch prints the command's usage and flags, and exits 0.
type helpRequested struct{ fs *flag.FlagSet }

func (helpRequested) Error() string { return "help requested" }

// printHelp prints c's usage and the flags of fs, the flag set of the command line asked about.
func printHelp(w io.Writer, c command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: payments %s [flags]\n  %s\n", fs.Name(), c.help)
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		fmt.Fprintln(w, "no flags (the environment configures the processes: README, \"Configuration\")")
		return
	}
	fmt.Fprintln(w, "flags:")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// newFlags returns a flag set that reports errors to the caller instead of printing usage.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parse parses args and turns any problem into a one-line usage error.
func parse(fs *flag.FlagSet, args []string, required ...string) error {
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return helpRequested{fs}
	} else if err != nil {
		return usagef("%s: %v", fs.Name(), err)
	}
	if fs.NArg() > 0 {
		return usagef("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var missing []string
	for _, r := range required {
		if !set[r] {
			missing = append(missing, "--"+r)
		}
	}
	if len(missing) > 0 {
		return usagef("%s: missing %s", fs.Name(), strings.Join(missing, ", "))
	}
	return nil
}
