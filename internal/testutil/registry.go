package testutil

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// RegistryBinary is Debian's docker-registry (the CNCF distribution
// registry, package docker-registry).
const RegistryBinary = "docker-registry"

// Registry is a real docker-registry process serving plain HTTP on a
// loopback port, with its storage in a temporary directory.
type Registry struct {
	// Host is the registry's host:port, for references like Host+"/repo:tag".
	Host string
	cmd  *exec.Cmd
	dir  string
	log  *os.File
}

// StartRegistry starts a registry on a free loopback port and waits until
// it answers /v2/. The error wraps exec.ErrNotFound when the binary is not
// installed, so a TestMain can apply the Missing rule itself.
func StartRegistry() (*Registry, error) {
	bin, err := exec.LookPath(RegistryBinary)
	if err != nil {
		return nil, fmt.Errorf("%s not installed (apt-get install docker-registry): %w", RegistryBinary, err)
	}
	dir, err := os.MkdirTemp("", "osb-registry-")
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	r := &Registry{dir: dir}
	if err := r.start(bin); err != nil {
		r.Stop()
		return nil, err
	}
	return r, nil
}

func (r *Registry) start(bin string) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("registry: free port: %w", err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, filepath.Join(r.dir, "data"), addr)
	cfgPath := filepath.Join(r.dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return fmt.Errorf("registry config: %w", err)
	}
	if r.log, err = os.Create(filepath.Join(r.dir, "registry.log")); err != nil {
		return fmt.Errorf("registry log: %w", err)
	}
	r.cmd = exec.Command(bin, "serve", cfgPath)
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	if err := r.cmd.Start(); err != nil {
		r.cmd = nil
		return fmt.Errorf("start %s: %w", bin, err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				r.Host = addr
				return nil
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(r.log.Name())
			return fmt.Errorf("registry at %s did not answer /v2/ in time; log:\n%s", addr, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Storage is the registry's filesystem storage root (blobs under
// docker/registry/v2/blobs), for tests that damage what it serves.
func (r *Registry) Storage() string { return filepath.Join(r.dir, "data") }

// Stop kills the registry and removes its storage.
func (r *Registry) Stop() {
	if r.cmd != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
	}
	if r.log != nil {
		r.log.Close()
	}
	os.RemoveAll(r.dir)
}

// NewRegistry starts a registry for one test and stops it at cleanup. A
// missing binary stops the test by the Missing rule.
func NewRegistry(t testing.TB) string {
	t.Helper()
	RequireTool(t, RegistryBinary)
	r, err := StartRegistry()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r.Host
}
