package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/ironcore-dev/os-builder/internal/exitcode"
)

// tree is a small command tree: a root, a group with one command, and a
// command added after the tree was built (as other files add theirs).
func tree(ran *string) *cobra.Command {
	root := &cobra.Command{Use: "tool"}
	group := &cobra.Command{Use: "group"}
	leaf := &cobra.Command{Use: "leaf", Args: ExactArgs(1), RunE: func(_ *cobra.Command, args []string) error {
		*ran = "leaf " + args[0]
		return nil
	}}
	group.AddCommand(leaf)
	root.AddCommand(group)
	root.AddCommand(&cobra.Command{Use: "late", RunE: func(*cobra.Command, []string) error {
		return fmt.Errorf("%w: %w", errors.New("a"), exitcode.MismatchError(errors.New("late failed")))
	}})
	return root
}

func TestExecute(t *testing.T) {
	tests := []struct {
		args   []string
		want   int
		stderr string
		ran    string
	}{
		{[]string{"group", "leaf", "x"}, exitcode.OK, "", "leaf x"},
		{[]string{"nope"}, exitcode.Usage, `tool: unknown command "nope" for "tool"`, ""},
		{[]string{"group", "nope"}, exitcode.Usage, `unknown command "nope" for "tool group"`, ""},
		{[]string{"group", "lef"}, exitcode.Usage, "did you mean leaf?", ""},
		{[]string{"group", "leaf"}, exitcode.Usage, "tool group leaf: want 1 argument(s), got 0", ""},
		{[]string{"group", "leaf", "--nope"}, exitcode.Usage, "unknown flag: --nope", ""},
		{[]string{"late"}, exitcode.Mismatch, "late failed", ""},
		{[]string{"group"}, exitcode.OK, "", ""}, // a group alone prints its help
	}
	for _, tc := range tests {
		var ran string
		var stdout, stderr bytes.Buffer
		root := tree(&ran)
		root.SetOut(&stdout)
		root.SetErr(&stderr)
		code := Execute(context.Background(), root, tc.args, &stderr, "")
		if code != tc.want || !strings.Contains(stderr.String(), tc.stderr) || ran != tc.ran {
			t.Errorf("tool %v: exit %d ran %q, want %d ran %q; stderr %q, want it to contain %q",
				tc.args, code, ran, tc.want, tc.ran, stderr.String(), tc.stderr)
		}
		if strings.Count(stderr.String(), "\n") > 1 {
			t.Errorf("tool %v: error printed more than once or with usage: %q", tc.args, stderr.String())
		}
	}
}

// FuzzYes: only y and yes (any case, surrounding blanks) confirm.
func FuzzYes(f *testing.F) {
	for _, s := range []string{"y\n", "YES", " yes \r\n", "n", "", "yess", "y y", "\x00y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, answer string) {
		w := strings.ToLower(strings.TrimSpace(answer))
		if Yes(answer) != (w == "y" || w == "yes") {
			t.Fatalf("Yes(%q) = %t", answer, Yes(answer))
		}
	})
}
