package pgtemp

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/ulikunitz/xz"
)

// tarEntry is one member of a test .txz: a regular file, a symbolic link
// when link is set, or what typ says (a directory, a hard link to link).
type tarEntry struct {
	name, body, link string
	mode             int64
	typ              byte
}

// writeTar writes entries to w as a tar stream, in their order.
func writeTar(t *testing.T, w io.Writer, entries []tarEntry) {
	t.Helper()
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Linkname: e.link, Typeflag: e.typ}
		switch {
		case e.typ != 0:
		case e.link != "":
			h.Typeflag = tar.TypeSymlink
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

// testJar builds a jar as zonky's are: one .txz holding the tree.
func testJar(t *testing.T, entries []tarEntry) []byte {
	t.Helper()
	var txz bytes.Buffer
	xw, err := xz.NewWriter(&txz)
	if err != nil {
		t.Fatal(err)
	}
	writeTar(t, xw, entries)
	if err := xw.Close(); err != nil {
		t.Fatal(err)
	}
	var jar bytes.Buffer
	zw := zip.NewWriter(&jar)
	w, err := zw.Create("postgres-linux-x86_64.txz")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(txz.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return jar.Bytes()
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// What the downloader accepts and refuses, against a Maven repository
// served on loopback: only the jar with the pinned checksum is unpacked, and
// nothing of a refused one is left where the binaries are looked for.
func TestEnsureDownloadedChecksTheJar(t *testing.T) {
	t.Parallel()
	good := []tarEntry{
		{name: "bin/initdb", body: "#!/bin/sh\n", mode: 0o700},
		{name: "bin/postgres", body: "#!/bin/sh\n", mode: 0o700},
		{name: "lib/libpq.so.5.15", body: "lib", mode: 0o600},
		{name: "lib/libpq.so.5", link: "libpq.so.5.15"},
	}
	goodJar := testJar(t, good)
	for _, tc := range []struct {
		name    string
		jar     []byte
		pinned  string // the checksum the downloader is given
		wantErr string // "" for success
	}{
		{"the pinned jar", goodJar, sha256Hex(goodJar), ""},
		{"another jar than the pinned one", testJar(t, good[:3]), sha256Hex(goodJar), "not the pinned"},
		{"a name outside the tree", testJar(t, append(good, tarEntry{name: "../escaped", body: "x", mode: 0o644})), "", "outside its tree"},
		{"a link outside the tree", testJar(t, append(good, tarEntry{name: "lib/evil", link: "/etc/passwd"})), "", "outside its tree"},
		{"no .txz", func() []byte {
			var b bytes.Buffer
			zw := zip.NewWriter(&b)
			_ = zw.Close()
			return b.Bytes()
		}(), "", "no .txz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var asked atomic.Value // the path last asked for
			asked.Store("")
			repo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				asked.Store(r.URL.Path)
				_, _ = w.Write(tc.jar)
			}))
			defer repo.Close()
			pinned := tc.pinned
			if pinned == "" {
				pinned = sha256Hex(tc.jar)
			}
			dir := filepath.Join(t.TempDir(), "cache", downloadedVersion)
			err := ensureDownloaded(context.Background(), dir,
				func(context.Context) (string, error) { return repo.URL + "/maven2/", nil }, pinned)
			if got := asked.Load(); got != "/maven2/"+downloadedJarPath {
				t.Errorf("asked the repository for %q, want /maven2/%s", got, downloadedJarPath)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				if left, _ := os.ReadDir(filepath.Dir(dir)); len(left) != 1 || left[0].Name() != downloadedVersion+".lock" {
					t.Fatalf("a refused jar left %v in the cache, want only the lock file", left)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Readable by everyone whatever the tar said: root's download
			// serves the server's own user.
			for name, want := range map[string]os.FileMode{".": 0o755, "bin": 0o755, "bin/postgres": 0o755, "lib/libpq.so.5.15": 0o644} {
				st, err := os.Stat(filepath.Join(dir, name))
				if err != nil || st.Mode().Perm() != want {
					t.Errorf("%s: %v (%v), want mode %v", name, st.Mode().Perm(), err, want)
				}
			}
			if target, err := os.Readlink(filepath.Join(dir, "lib/libpq.so.5")); err != nil || target != "libpq.so.5.15" {
				t.Errorf("lib/libpq.so.5 -> %q (%v)", target, err)
			}
			// A second call finds the tree and asks nothing.
			asked.Store("")
			if err := ensureDownloaded(context.Background(), dir,
				func(context.Context) (string, error) { return repo.URL, nil }, pinned); err != nil || asked.Load() != "" {
				t.Fatalf("second call: %v, asked %q", err, asked.Load())
			}
		})
	}
}

// untar writes nothing outside its directory, whatever the archive's names
// and links say: each archive is unpacked into tree/ beside a file of the
// parent's own, and the parent must hold the same two afterwards, that file
// unchanged and with no second name. A link chain passes a check of the
// names' text (b/l -> .. is tree/, x -> b/l/.. is "b" as text but the
// parent once b/l is followed), so the test sends a file through one.
func TestUntarKeepsToItsDirectory(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		entries func(parent string) []tarEntry
	}{
		{"a file through a chain of links", func(string) []tarEntry {
			return []tarEntry{
				{name: "b/l", link: ".."},
				{name: "x", link: "b/l/.."},
				{name: "x/evil", body: "escaped", mode: 0o644},
			}
		}},
		{"a chain of links leading outside", func(string) []tarEntry {
			return []tarEntry{
				{name: "b/l", link: ".."},
				{name: "x", link: "b/l/.."},
			}
		}},
		{"a file through an absolute link", func(parent string) []tarEntry {
			return []tarEntry{
				{name: "abs", link: parent},
				{name: "abs/evil", body: "escaped", mode: 0o644},
			}
		}},
		{"a ../ name", func(string) []tarEntry {
			return []tarEntry{{name: "../evil", body: "escaped", mode: 0o644}}
		}},
		{"a ../ name under a directory", func(string) []tarEntry {
			return []tarEntry{{name: "lib/../../evil", body: "escaped", mode: 0o644}}
		}},
		{"a hard link to a file outside, then written", func(string) []tarEntry {
			return []tarEntry{
				{name: "h", link: "../outside", typ: tar.TypeLink},
				{name: "h", body: "overwritten", mode: 0o644},
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			parent := t.TempDir()
			dir := filepath.Join(parent, "tree")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			outside := filepath.Join(parent, "outside")
			if err := os.WriteFile(outside, []byte("untouched"), 0o644); err != nil {
				t.Fatal(err)
			}
			var archive bytes.Buffer
			writeTar(t, &archive, tc.entries(parent))

			err := untar(tar.NewReader(&archive), dir)
			if err == nil {
				t.Error("untar succeeded, want it to refuse the archive")
			} else {
				t.Logf("refused: %v", err)
			}
			var left []string
			if entries, err := os.ReadDir(parent); err == nil {
				for _, e := range entries {
					left = append(left, e.Name())
				}
			}
			if !slices.Equal(left, []string{"outside", "tree"}) {
				t.Errorf("the parent holds %q after untar, want only [outside tree]", left)
			}
			if b, err := os.ReadFile(outside); err != nil || string(b) != "untouched" { //nolint:gosec // G304: the test's own file
				t.Errorf("the file outside reads %q (%v), want untouched", b, err)
			}
			if st, err := os.Lstat(outside); err != nil || st.Sys().(*syscall.Stat_t).Nlink != 1 {
				t.Errorf("the file outside has another name in the tree (%v)", err)
			}
		})
	}
}

// A tree as PostgreSQL's: libraries' names linked to the file beside them,
// before and after it in the archive, a link up and across the tree, and
// modes made readable by everyone (executables executable) whatever the
// archive said.
func TestUntarUnpacksATree(t *testing.T) {
	t.Parallel()
	var archive bytes.Buffer
	writeTar(t, &archive, []tarEntry{
		{name: "bin/", typ: tar.TypeDir, mode: 0o700},
		{name: "bin/postgres", body: "#!/bin/sh\n", mode: 0o700},
		{name: "lib/libpq.so.5", link: "libpq.so.5.15"},
		{name: "lib/libpq.so.5.15", body: "lib", mode: 0o600},
		{name: "lib/libpq.so", link: "libpq.so.5.15"},
		{name: "share/postgresql/extension/pq.so", link: "../../../lib/libpq.so.5"},
	})
	dir := t.TempDir()
	if err := untar(tar.NewReader(&archive), dir); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{
		"bin": 0o755, "bin/postgres": 0o755, "lib": 0o755, "lib/libpq.so.5.15": 0o644,
		"share": 0o755, "share/postgresql": 0o755, "share/postgresql/extension": 0o755,
	} {
		st, err := os.Lstat(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
		} else if st.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", name, st.Mode().Perm(), want)
		}
	}
	for name, want := range map[string]string{
		"lib/libpq.so.5":                   "libpq.so.5.15",
		"lib/libpq.so":                     "libpq.so.5.15",
		"share/postgresql/extension/pq.so": "../../../lib/libpq.so.5",
	} {
		if target, err := os.Readlink(filepath.Join(dir, name)); err != nil || target != want {
			t.Errorf("%s -> %q (%v), want -> %q", name, target, err, want)
		}
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != "lib" { //nolint:gosec // G304: the tree the test unpacked
			t.Errorf("%s reads %q (%v), want the library", name, b, err)
		}
	}
}
