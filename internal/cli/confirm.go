package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ironcore-dev/os-builder/internal/exitcode"
)

// Confirm asks question on out and reads the answer from in when in is a
// terminal; only "y" or "yes" (any case) confirms. Without a terminal it
// refuses with a usage error that names flag, so scripts say what they mean.
func Confirm(in *os.File, out io.Writer, question, flag string) error {
	if in == nil || !IsTerminal(in) {
		return exitcode.UsageError(fmt.Errorf("%s: refusing without a terminal to ask on; add %s", question, flag))
	}
	fmt.Fprintf(out, "%s [y/N] ", question)
	line, err := bufio.NewReader(io.LimitReader(in, 4096)).ReadString('\n')
	if err != nil && line == "" {
		return exitcode.UsageError(fmt.Errorf("%s: no answer (%v); nothing done (%s skips the question)", question, err, flag))
	}
	if !Yes(line) {
		return exitcode.UsageError(fmt.Errorf("%s: not confirmed; nothing done", question))
	}
	return nil
}

// Yes reports whether an answer to a y/N question confirms.
func Yes(answer string) bool {
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return true
	}
	return false
}

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
