package docs_test

import (
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	bootcli "github.com/ironcore-dev/os-builder/boot/cli"
	buildercli "github.com/ironcore-dev/os-builder/builder/cli"
)

// phrasedPerCommand are the flag names whose one meaning each command
// says in its own words, and that meaning. Any other name says the same
// words wherever it is, because one definition (internal/cli, or one
// function of its CLI) adds it.
var phrasedPerCommand = map[string]string{
	"json":          "output as JSON (build also streams its progress so; render prints its document)",
	"arch":          "an architecture name (amd64, arm64), picking the lane, manifest or build the command works on",
	"exclude-layer": "a recipe layer left out of what the command makes of the recipe",
	"sign-key":      "the Secure Boot signing key (builder genkey's db.key): build signs UKIs, push and index SBOM and provenance",
	"sign-cert":     "its certificate (db.crt): for --sign-key, or inspect's check of those signatures",
	// Known, not yet one: build --verify hashes the artifacts, inspect
	// --verify checks REF against output directories.
	"verify": "TWO MEANINGS, known (issue 29): build hashes artifacts, inspect checks REF against outputs",
}

// sharedMeanings: a flag whose usage says this says what the family's
// shared flag of that name means, and must be that flag.
var sharedMeanings = map[string]string{
	"plain http": "insecure",
}

type flagUse struct {
	command string
	flag    *pflag.Flag
}

// visibleFlags are the flags of both command trees a user is shown, by
// name: hidden aliases (old spellings) are exempt.
func visibleFlags(roots ...*cobra.Command) map[string][]flagUse {
	uses := map[string][]flagUse{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if !f.Hidden && f.Name != "help" {
				uses[f.Name] = append(uses[f.Name], flagUse{c.CommandPath(), f})
			}
		})
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	for _, r := range roots {
		walk(r)
	}
	return uses
}

// vocabularyProblems is what is wrong with the vocabulary of the trees:
// one name with two meanings (two usage texts), one meaning with two
// names (one usage text, or a shared flag's meaning, under two names),
// and durations printed another way than 2m, 10m, 168h.
func vocabularyProblems(roots ...*cobra.Command) []string {
	uses := visibleFlags(roots...)
	var problems []string
	byUsage := map[string][]string{}
	for _, name := range slices.Sorted(maps.Keys(uses)) {
		texts := map[string][]string{}
		for _, u := range uses[name] {
			texts[u.flag.Usage] = append(texts[u.flag.Usage], u.command)
			if u.flag.Value.Type() == "duration" && (strings.HasSuffix(u.flag.DefValue, "m0s") || strings.Contains(u.flag.DefValue, "h0m")) {
				problems = append(problems, u.command+" --"+name+": default "+u.flag.DefValue+" (the family prints durations as 2m, 10m, 168h)")
			}
			for phrase, shared := range sharedMeanings {
				if name != shared && strings.Contains(strings.ToLower(u.flag.Usage), phrase) {
					problems = append(problems, u.command+" --"+name+": means --"+shared+" ("+phrase+"): one meaning, two names")
				}
			}
		}
		if _, ok := phrasedPerCommand[name]; !ok && len(texts) > 1 {
			var ways []string
			for _, text := range slices.Sorted(maps.Keys(texts)) {
				ways = append(ways, strings.Join(texts[text], ", ")+": "+text)
			}
			problems = append(problems, "--"+name+" has "+strconv.Itoa(len(texts))+" meanings:\n\t"+strings.Join(ways, "\n\t"))
		}
		for text := range texts {
			byUsage[text] = append(byUsage[text], name)
		}
	}
	for _, text := range slices.Sorted(maps.Keys(byUsage)) {
		if names := byUsage[text]; len(names) > 1 {
			problems = append(problems, "one meaning, names --"+strings.Join(names, ", --")+": "+text)
		}
	}
	return problems
}

// TestOneVocabulary: across builder and serverboot a flag name has one
// meaning and a meaning one name (--insecure was also --insecure-registry,
// --recipe a file on push and a name on cache push, --cache-dir two
// caches with two defaults), and durations print one way.
func TestOneVocabulary(t *testing.T) {
	for _, p := range vocabularyProblems(buildercli.Command(io.Discard, io.Discard), bootcli.Command(io.Discard, io.Discard)) {
		t.Error(p)
	}
}

// TestVocabularyCaught: the check sees each kind of drift.
func TestVocabularyCaught(t *testing.T) {
	cmd := func(name string, def func(f *pflag.FlagSet)) *cobra.Command {
		c := &cobra.Command{Use: name, Run: func(*cobra.Command, []string) {}}
		def(c.Flags())
		return c
	}
	root := &cobra.Command{Use: "tool"}
	var s string
	var b bool
	root.AddCommand(
		cmd("a", func(f *pflag.FlagSet) { f.StringVar(&s, "recipe", "", "a recipe file") }),
		cmd("b", func(f *pflag.FlagSet) { f.StringVar(&s, "recipe", "", "a recipe name") }),
		cmd("c", func(f *pflag.FlagSet) {
			f.BoolVar(&b, "insecure-registry", false, "reach the registry over plain HTTP")
		}),
		cmd("d", func(f *pflag.FlagSet) { f.StringVar(&s, "out", "", "where"); f.StringVar(&s, "dest", "", "where") }),
		cmd("e", func(f *pflag.FlagSet) { f.Duration("wait", 600e9, "how long") }),
		cmd("f", func(f *pflag.FlagSet) {
			f.BoolVar(&b, "old", false, "reach the registry over plain HTTP")
			_ = f.MarkHidden("old")
		}),
	)
	got := strings.Join(vocabularyProblems(root), "\n")
	for _, want := range []string{"--recipe has 2 meanings", "tool c --insecure-registry: means --insecure", "names --dest, --out", "tool e --wait: default 10m0s"} {
		if !strings.Contains(got, want) {
			t.Errorf("not caught: %s\ngot:\n%s", want, got)
		}
	}
	if strings.Contains(got, "--old") {
		t.Errorf("a hidden alias was counted:\n%s", got)
	}
}
