package deploy_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// promtoolModule is the Go module promtool is built from when none is
// installed; its version is the one go.mod requires, so the PromQL parser
// these tests use and the promtool that checks the files are one release.
const promtoolModule = "github.com/prometheus/prometheus"

var (
	promtoolOnce sync.Once
	promtoolPath string
	promtoolErr  error
)

// promtool is Prometheus's own checker: an installed one (Debian's
// prometheus package) if there is one, else built from the Prometheus Go
// module with `go build` and kept in the user's cache, so that deploy/'s
// checks need no system package (issue 26). Missing is a failure, not a
// skip.
func promtool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	promtoolOnce.Do(func() { promtoolPath, promtoolErr = buildPromtool() })
	if promtoolErr != nil {
		t.Fatalf("no promtool installed, and building one failed: %v", promtoolErr)
	}
	return promtoolPath
}

// buildPromtool returns the cached promtool of the required version,
// building it first if the cache has none. The build runs in a module of
// its own (a temporary go.mod that requires only Prometheus), so this
// module's go.mod and go.sum are never touched; the binary appears under
// its final name only when whole (a rename), so test binaries that build
// at once never run a half-written one.
func buildPromtool() (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", err
	}
	version, err := run(exec.Command(goTool, "list", "-m", "-f", "{{.Version}}", promtoolModule))
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "payment-service", "promtool", version)
	bin := filepath.Join(dir, "promtool")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	src, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module promtoolbuild\n"), 0o644); err != nil {
		return "", err
	}
	pkg := promtoolModule + "/cmd/promtool"
	for _, args := range [][]string{
		{"get", pkg + "@" + version},
		{"build", "-o", filepath.Join(src, "promtool"), pkg},
	} {
		cmd := exec.Command(goTool, args...)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		if _, err := run(cmd); err != nil {
			return "", err
		}
	}
	return bin, os.Rename(filepath.Join(src, "promtool"), bin)
}

// run runs cmd and returns its trimmed standard output, or an error that
// holds what it printed on standard error.
func run(cmd *exec.Cmd) (string, error) {
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}
