package main

import (
	"flag"
	"io"
	"strings"
)

// newFlags returns a flag set that reports errors to the caller instead of printing usage.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parse parses args and turns any problem into a one-line usage error.
func parse(fs *flag.FlagSet, args []string, required ...string) error {
	if err := fs.Parse(args); err != nil {
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
