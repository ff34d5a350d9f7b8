package qemu

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// SWTPMBinary is the software TPM (Debian package swtpm).
var SWTPMBinary = "swtpm"

// TPM is a running swtpm: a fresh TPM 2.0 whose state lives in a
// temporary directory.
type TPM struct {
	// Socket is the control socket QEMU's TPM emulator backend talks to
	// (Config.TPMSocket); swtpm exits when QEMU disconnects.
	Socket string
	// TCTI, set by StartTPMServer, is the tpm2-tss TCTI string of the TPM
	// command socket, e.g. for systemd tools' --tpm2-device=.
	TCTI string
	cmd  *exec.Cmd
	dir  string
}

// StartTPM starts swtpm for one VM and waits until its socket is there.
func StartTPM(ctx context.Context) (*TPM, error) {
	return startTPM(ctx, false)
}

// StartTPMServer starts swtpm for host tools (tpm2-tss's swtpm TCTI, with
// libtss2-tcti-swtpm0): a command socket and its ".ctrl" control socket,
// the TPM already started up.
func StartTPMServer(ctx context.Context) (*TPM, error) {
	return startTPM(ctx, true)
}

func startTPM(ctx context.Context, server bool) (*TPM, error) {
	dir, err := os.MkdirTemp("", "osb-swtpm-")
	if err != nil {
		return nil, fmt.Errorf("swtpm: %w", err)
	}
	t := &TPM{dir: dir, Socket: filepath.Join(dir, "swtpm.sock")}
	args := []string{"socket", "--tpm2", "--tpmstate", "dir=" + dir,
		"--log", "file=" + filepath.Join(dir, "swtpm.log")}
	wait := t.Socket
	if server {
		// The swtpm TCTI finds the control socket at path + ".ctrl".
		t.TCTI = "swtpm:path=" + t.Socket
		args = append(args, "--server", "type=unixio,path="+t.Socket,
			"--ctrl", "type=unixio,path="+t.Socket+".ctrl", "--flags", "startup-clear")
	} else {
		args = append(args, "--ctrl", "type=unixio,path="+t.Socket)
	}
	t.cmd = exec.CommandContext(ctx, SWTPMBinary, args...)
	t.cmd.WaitDelay = 5 * time.Second
	if err := t.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("swtpm: %w", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(wait); err == nil {
			return t, nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "swtpm.log"))
			t.Stop()
			return nil, fmt.Errorf("swtpm: no socket %s after 10s: %s", wait, log)
		}
	}
}

// Stop ends swtpm and removes its state.
func (t *TPM) Stop() {
	if t.cmd.Process != nil {
		t.cmd.Process.Kill()
	}
	t.cmd.Wait()
	os.RemoveAll(t.dir)
}
