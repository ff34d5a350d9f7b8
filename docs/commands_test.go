// Package docs_test checks that the documentation says what the code does:
// every command line shown in README.md, docs/*.md and the Makefile parses
// with the command trees as they are, the tables of exit codes and recipe
// fields list what the code defines, and the CLIs keep the family's
// conventions. (The image-format layer table is checked in osimage.)
package docs_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	bootcli "github.com/ironcore-dev/os-builder/boot/cli"
	buildercli "github.com/ironcore-dev/os-builder/builder/cli"
	"github.com/ironcore-dev/os-builder/redfishemu"
	"github.com/ironcore-dev/os-builder/redfishemu/qemutier"
)

// programs maps how the docs invoke a command to the command.
var programs = map[string]string{
	"builder": "builder", "bin/builder": "builder", "./bin/builder": "builder",
	"serverboot": "serverboot", "bin/serverboot": "serverboot", "./bin/serverboot": "serverboot",
	"redfish-emulator": "redfish-emulator", "bin/redfish-emulator": "redfish-emulator", "./bin/redfish-emulator": "redfish-emulator",
}

// docCommand is one documented invocation of one of our commands.
type docCommand struct {
	where string   // file:line
	words []string // program first
}

func (c docCommand) String() string { return c.where + ": " + strings.Join(c.words, " ") }

// TestDocumentedCommandsParse runs every documented command line through
// its command tree: unknown commands and flags fail. Commands added later
// are covered without changing this test.
func TestDocumentedCommandsParse(t *testing.T) {
	cmds := documentedCommands(t)
	seen := map[string]int{}
	for _, c := range cmds {
		seen[programs[c.words[0]]]++
		if err := parses(c.words); err != nil {
			t.Errorf("%s\n\t%v", c, err)
		}
	}
	// The extraction must keep finding the commands, or this test says nothing.
	for _, p := range []string{"builder", "serverboot", "redfish-emulator"} {
		if seen[p] < 3 {
			t.Errorf("found %d documented %s command lines: is the extraction broken?", seen[p], p)
		}
	}
	t.Logf("%d documented command lines parse (%v)", len(cmds), seen)
}

// TestDriftCaught: the check finds the kinds of drift it exists for.
func TestDriftCaught(t *testing.T) {
	for _, line := range []string{
		"builder build recipes/test.yaml --exclude dpservice", // the flag is --exclude-layer
		"builder cache-import REF DIR",                        // no such command
		"builder cache frobnicate",                            // no such subcommand
		"serverboot eject --bmc URL --image REF",              // eject takes no --image
		"redfish-emulator --listen 127.0.0.1:8000 --nope",
	} {
		if err := parses(strings.Fields(line)); err == nil {
			t.Errorf("%s: parses, want an error", line)
		}
	}
	for _, line := range []string{"builder --help", "builder cache prune --all", "serverboot plan --image REF --json", "redfish-emulator --qemu --qemu-dir D"} {
		if err := parses(strings.Fields(line)); err != nil {
			t.Errorf("%s: %v", line, err)
		}
	}
}

// parses checks words (program first) against the program's flags and
// commands without running anything.
func parses(words []string) error {
	args := words[1:]
	switch programs[words[0]] {
	case "builder":
		return parsesCobra(buildercli.Command(io.Discard, io.Discard), args)
	case "serverboot":
		return parsesCobra(bootcli.Command(io.Discard, io.Discard), args)
	case "redfish-emulator":
		return parsesEmulator(args)
	}
	return fmt.Errorf("not one of our programs: %s", words[0])
}

// parsesCobra finds the command args name and checks its flags by name
// (values are often placeholders, such as --timeout D).
func parsesCobra(root *cobra.Command, args []string) error {
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	cmd.InitDefaultHelpFlag()
	pos, err := checkFlags(rest, func(name string, short bool) (bool, bool) {
		var f *pflag.Flag
		if short {
			if f = cmd.Flags().ShorthandLookup(name); f == nil {
				f = cmd.InheritedFlags().ShorthandLookup(name)
			}
		} else {
			f = cmd.Flag(name)
		}
		return f != nil, f != nil && f.NoOptDefVal == ""
	})
	if err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	if cmd.HasSubCommands() && len(pos) > 0 {
		return fmt.Errorf("unknown command %q for %q", pos[0], cmd.CommandPath())
	}
	return nil
}

// captureFlags hands the emulator's flag set to the test (Main calls a
// tier's Flags once its own flags are defined) and stops Main after parsing.
type captureFlags struct{ fs **flag.FlagSet }

func (c captureFlags) Flags(fs *flag.FlagSet) { *c.fs = fs }
func (captureFlags) Attach(context.Context, *redfishemu.Options, io.Writer) (func(), error) {
	return nil, errors.New("not serving")
}

func parsesEmulator(args []string) error {
	var fs *flag.FlagSet
	redfishemu.Main(context.Background(), []string{"-h"}, io.Discard, &qemutier.CLI{}, captureFlags{&fs})
	if fs == nil {
		return errors.New("redfish-emulator: no flag set captured")
	}
	_, err := checkFlags(args, func(name string, _ bool) (bool, bool) {
		f := fs.Lookup(name)
		if f == nil {
			return false, false
		}
		b, ok := f.Value.(interface{ IsBoolFlag() bool })
		return true, !ok || !b.IsBoolFlag()
	})
	return err
}

// checkFlags walks args: every flag must exist (lookup says whether it
// takes a value, which then follows unless given with =); it returns the
// positional arguments.
func checkFlags(args []string, lookup func(name string, short bool) (exists, takesValue bool)) ([]string, error) {
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(pos, args[i+1:]...), nil
		case len(a) < 2 || a[0] != '-':
			pos = append(pos, a)
			continue
		}
		short := a[1] != '-'
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if short && len(name) > 1 {
			if ok, _ := lookup(name[:1], true); ok {
				name, hasValue = name[:1], true // -ofile
			}
		}
		exists, takesValue := lookup(name, short)
		if !exists {
			return nil, fmt.Errorf("unknown flag: %s", a)
		}
		if takesValue && !hasValue {
			i++
		}
	}
	return pos, nil
}

// documentedCommands extracts our command lines from README.md, docs/*.md
// and the Makefile.
func documentedCommands(t *testing.T) []docCommand {
	t.Helper()
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"../README.md"}, files...)
	var cmds []docCommand
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, markdownCommands(strings.TrimPrefix(f, "../"), string(b))...)
	}
	b, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	return append(cmds, makefileCommands("Makefile", string(b))...)
}

// shellFences are the fenced blocks holding command lines: shell, and
// plain ones (synopses).
var shellFences = map[string]bool{"": true, "sh": true, "bash": true, "shell": true, "console": true}

// inlineCode is a Markdown code span; it may run over a line break.
var inlineCode = regexp.MustCompile("`([^`]+)`")

// markdownCommands finds our commands in shell (and plain) fenced blocks,
// line by line with continuations joined and variables assigned earlier
// in the file expanded, and in code spans of the prose.
func markdownCommands(name, text string) []docCommand {
	var cmds []docCommand
	vars := map[string]string{}
	var prose strings.Builder
	fence, lang := false, ""
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			fence, lang = !fence, strings.TrimPrefix(trimmed, "```")
			prose.WriteString("\n")
			continue
		}
		if !fence {
			prose.WriteString(line + "\n")
			continue
		}
		prose.WriteString("\n") // keep line numbers
		if !shellFences[lang] {
			continue
		}
		start := i
		for i+1 < len(lines) && (strings.HasSuffix(line, "\\") || lang == "" && continues(lines[i+1])) {
			i++
			line = strings.TrimSuffix(line, "\\") + " " + lines[i]
			prose.WriteString("\n")
		}
		where := fmt.Sprintf("%s:%d", name, start+1)
		if lang == "" {
			// A synopsis: | separates alternatives, # starts a comment.
			line, _, _ = strings.Cut(line, "#")
			cmds = append(cmds, commandsOf(where, strings.Fields(line), nil)...)
			continue
		}
		for _, seg := range shellSegments(expand(line, vars)) {
			cmds = append(cmds, commandsOf(where, seg, vars)...)
		}
	}
	p := prose.String()
	for _, m := range inlineCode.FindAllStringSubmatchIndex(p, -1) {
		span := strings.ReplaceAll(p[m[2]:m[3]], "\n", " ")
		where := fmt.Sprintf("%s:%d", name, strings.Count(p[:m[0]], "\n")+1)
		cmds = append(cmds, commandsOf(where, strings.Fields(span), nil)...)
	}
	return cmds
}

// continues reports whether a synopsis line continues the one before: it
// is indented.
func continues(next string) bool {
	return strings.TrimSpace(next) != "" && (next[0] == ' ' || next[0] == '\t')
}

// makeVar is a Makefile variable assignment.
var makeVar = regexp.MustCompile(`^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*[?:]?=\s*(.*)$`)

// makefileCommands finds our commands in the Makefile's recipe lines, with
// its variables expanded.
func makefileCommands(name, text string) []docCommand {
	vars := map[string]string{}
	var cmds []docCommand
	for i, line := range strings.Split(text, "\n") {
		if m := makeVar.FindStringSubmatch(line); m != nil {
			vars[m[1]] = m[2]
			continue
		}
		if !strings.HasPrefix(line, "\t") {
			continue
		}
		line = strings.ReplaceAll(expand(line, vars), "$$", "$")
		for _, seg := range shellSegments(line) {
			cmds = append(cmds, commandsOf(fmt.Sprintf("%s:%d", name, i+1), seg, nil)...)
		}
	}
	return cmds
}

var varRef = regexp.MustCompile(`\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|\(([A-Za-z_][A-Za-z0-9_]*)\)|([A-Za-z_][A-Za-z0-9_]*))`)

// expand replaces $NAME, ${NAME} and $(NAME) for the names in vars.
func expand(s string, vars map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(ref string) string {
		m := varRef.FindStringSubmatch(ref)
		if v, ok := vars[m[1]+m[2]+m[3]]; ok {
			return v
		}
		return ref
	})
}

var assignment = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)=(.*)$`)

// commandsOf turns one simple command (words) into our commands: leading
// assignments are recorded in vars (when not nil) and skipped; a synopsis's
// brackets are dropped and its alternatives (plan|boot) expanded.
func commandsOf(where string, words []string, vars map[string]string) []docCommand {
	for len(words) > 0 {
		if words[0] == "export" {
			words = words[1:]
			continue
		}
		m := assignment.FindStringSubmatch(words[0])
		if m == nil {
			break
		}
		if vars != nil && m[2] != "" {
			vars[m[1]] = m[2]
		}
		words = words[1:]
	}
	if len(words) == 0 || programs[words[0]] == "" {
		return nil
	}
	var clean []string
	for _, w := range words {
		w = strings.Trim(w, "[]")
		if w != "" && w != "..." && w != "|" {
			clean = append(clean, w)
		}
	}
	variants := [][]string{{clean[0]}}
	flags := false
	for _, w := range clean[1:] {
		flags = flags || strings.HasPrefix(w, "-")
		alts := []string{w}
		if !flags && strings.Contains(w, "|") {
			alts = strings.Split(w, "|")
		}
		var next [][]string
		for _, v := range variants {
			for _, a := range alts {
				next = append(next, append(v[:len(v):len(v)], a))
			}
		}
		variants = next
	}
	cmds := make([]docCommand, len(variants))
	for i, v := range variants {
		cmds[i] = docCommand{where: where, words: v}
	}
	return cmds
}

// shellSegments splits a shell line into simple commands' words: quotes
// are removed, pipes, lists, background and command substitution separate
// commands, redirections and comments are dropped.
func shellSegments(line string) [][]string {
	var segs [][]string
	var cur []string
	var word strings.Builder
	inWord, skipNext := false, false
	flush := func() {
		if inWord {
			if !skipNext {
				cur = append(cur, word.String())
			}
			skipNext = false
		}
		word.Reset()
		inWord = false
	}
	end := func() {
		flush()
		if len(cur) > 0 {
			segs = append(segs, cur)
		}
		cur = nil
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'' || c == '"':
			j := strings.IndexByte(line[i+1:], c)
			if j < 0 {
				j = len(line) - i - 1
			}
			word.WriteString(line[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case c == '#' && !inWord:
			end()
			return segs
		case c == ' ' || c == '\t':
			flush()
		case c == '$' && i+1 < len(line) && line[i+1] == '(':
			end()
			i++
		case c == '(' || c == ')' || c == '|' || c == '&' || c == ';':
			end()
		case c == '>' || c == '<':
			if w := word.String(); inWord && strings.Trim(w, "0123456789") == "" {
				word.Reset() // the fd of 2>
				inWord = false
			}
			flush()
			skipNext = true
			if i+1 < len(line) && line[i+1] == '&' {
				i++ // 2>&1
			}
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	end()
	return segs
}
