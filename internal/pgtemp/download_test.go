package pgtemp

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ulikunitz/xz"
)

// tarEntry is one member of a test .txz.
type tarEntry struct {
	name, body, link string
	mode             int64
}

// testJar builds a jar as zonky's are: one .txz holding the tree.
func testJar(t *testing.T, entries []tarEntry) []byte {
	t.Helper()
	var txz bytes.Buffer
	xw, err := xz.NewWriter(&txz)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(xw)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.body)), Typeflag: tar.TypeReg}
		if e.link != "" {
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, e.link, 0
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
