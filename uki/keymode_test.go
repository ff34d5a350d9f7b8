package uki

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadSignerKeyMode: a private key others can read (or replace) is
// refused, as ssh refuses one, naming the file and its mode, unless
// OSB_ALLOW_INSECURE_KEY_MODE=1 says so.
func TestLoadSignerKeyMode(t *testing.T) {
	src := testKeyDir(t)
	key, err := os.ReadFile(filepath.Join(src, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		mode  os.FileMode
		allow string
		ok    bool
	}{
		{0o600, "", true},
		{0o400, "", true},
		{0o640, "", false},
		{0o644, "", false},
		{0o604, "", false},
		{0o620, "", false},
		{0o660, "0", false},
		{0o644, "1", true},
	}
	for _, tc := range tests {
		t.Run(tc.mode.String()+"/"+tc.allow, func(t *testing.T) {
			t.Setenv(AllowInsecureKeyModeEnv, tc.allow)
			p := filepath.Join(t.TempDir(), "db.key")
			if err := os.WriteFile(p, key, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, tc.mode); err != nil {
				t.Fatal(err)
			}
			_, _, err := LoadSigner(p, filepath.Join(src, CertFile))
			if tc.ok {
				if err != nil {
					t.Errorf("LoadSigner: %v", err)
				}
				return
			}
			mode := fmt.Sprintf("%#o", tc.mode.Perm())
			if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), mode) || !strings.Contains(err.Error(), AllowInsecureKeyModeEnv) {
				t.Errorf("LoadSigner of a %s key: %v, want an error naming %s, its mode and %s", mode, err, p, AllowInsecureKeyModeEnv)
			}
		})
	}
}
