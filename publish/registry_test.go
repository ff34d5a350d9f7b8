package publish_test

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files")

// registryHost is host:port of the docker-registry process TestMain runs;
// empty when the binary is missing outside CI.
var registryHost string

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "push" {
		os.Exit(pushHelper(os.Args[1:]))
	}
	flag.Parse()
	stop, err := startRegistry()
	if err != nil {
		fmt.Fprintln(os.Stderr, "registry:", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

// startRegistry runs Debian's docker-registry (distribution 2.x) on a free
// loopback port with filesystem storage in a temporary directory.
func startRegistry() (stop func(), err error) {
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		if os.Getenv("CI") != "" {
			return nil, fmt.Errorf("docker-registry not installed (apt-get install docker-registry): %w", err)
		}
		return func() {}, nil
	}
	tmp, err := os.MkdirTemp("", "publish-registry-")
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
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
`, filepath.Join(tmp, "data"), addr)
	cfgPath := filepath.Join(tmp, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve", cfgPath)
	logf, err := os.Create(filepath.Join(tmp, "registry.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	stop = func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		os.RemoveAll(tmp)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logf.Name())
			stop()
			return nil, fmt.Errorf("registry at %s did not answer /v2/ in time; log:\n%s", addr, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	registryHost = addr
	return stop, nil
}

func requireRegistry(t testing.TB) string {
	t.Helper()
	if registryHost == "" {
		t.Skip("docker-registry not installed")
	}
	return registryHost
}
