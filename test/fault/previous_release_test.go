//go:build fault

package fault

// The previous release beside this one (docs/deploying.md): its
// binary, built from the commit deploy/previous-release names, and the
// replicas that run it.

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// previousReleaseFile names the previous release's commit, relative to this
// package.
const previousReleaseFile = "../../deploy/previous-release"

var previousBuild struct {
	once sync.Once
	bin  string
	err  error
}

// previousRelease returns the path of the previous release's binary,
// building it once per commit: from the commit's tree (git archive, so the
// work tree is not touched) into the user's cache directory, where a rerun
// finds it. The test fails, never skips, when the commit is not in this
// clone: the mixed fleet is what proves a rolling deploy safe.
func previousRelease(t testing.TB) string {
	t.Helper()
	previousBuild.once.Do(func() { previousBuild.bin, previousBuild.err = buildPreviousRelease() })
	if previousBuild.err != nil {
		t.Fatalf("the previous release: %v", previousBuild.err)
	}
	return previousBuild.bin
}

func buildPreviousRelease() (string, error) {
	commit, err := previousReleaseCommit()
	if err != nil {
		return "", err
	}
	full, err := exec.Command("git", "rev-parse", "--verify", "--quiet", commit+"^{commit}").Output()
	if err != nil {
		return "", fmt.Errorf("commit %s (%s) is not in this clone: the mixed-fleet tests build the service from it; "+
			"clone the full history (git fetch --unshallow) or move %s forward", commit, previousReleaseFile, previousReleaseFile)
	}
	commit = strings.TrimSpace(string(full))
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(cache, "payment-service-fault", "previous-release", commit, "payment-service")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	src, err := os.MkdirTemp("", "previous-release-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	// From the top of the work tree: in a subdirectory git archives only
	// that subdirectory.
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("find the work tree: %w", err)
	}
	extract := exec.Command("sh", "-c", `git archive --format=tar "$1" | tar -x -C "$2"`, "sh", commit, src)
	extract.Dir = strings.TrimSpace(string(top))
	if out, err := extract.CombinedOutput(); err != nil {
		return "", fmt.Errorf("extract %s: %w\n%s", commit, err, out)
	}
	// Built without -race: the old code is not under test for races, and
	// the machine's cores go to the current binary's detector.
	tmp := bin + ".tmp"
	build := exec.Command("go", "build", "-o", tmp, "./cmd/payment-service")
	build.Dir = src
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", commit, err, out)
	}
	// The rename makes the cached binary appear whole or not at all.
	return bin, os.Rename(tmp, bin)
}

// previousReleaseCommit reads the commit from previousReleaseFile.
func previousReleaseCommit() (string, error) {
	f, err := os.Open(previousReleaseFile)
	if err != nil {
		return "", err
	}
	defer f.Close() //nolint:errcheck // read only
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		if l := strings.TrimSpace(lines.Text()); l != "" && !strings.HasPrefix(l, "#") {
			return l, nil
		}
	}
	if err := lines.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s names no commit", previousReleaseFile)
}

// runNext makes the replica's next start run bin: the previous release's
// binary, or "" for this tree's (the replica is rolled).
func (r *replica) runNext(bin string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bin = bin
}

// previous reports whether the replica's last start ran the previous
// release.
func (r *replica) previous() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ran != "" && r.ran != binary
}

// servingFor returns the running replicas that serve c. The previous
// release has no refunds: its router answers 404 to
// POST /payments/{id}/refunds, so during a rolling deploy a refund must
// reach a replica of the new release (docs/deploying.md, "During the
// roll"); the careful client sends it only to those.
func (s *stack) servingFor(c call) []*replica {
	up := s.running()
	if !c.refund {
		return up
	}
	var out []*replica
	for _, r := range up {
		if !r.previous() {
			out = append(out, r)
		}
	}
	return out
}
