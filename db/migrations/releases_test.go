package migrations_test

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// releasesHeader is how every migration begins: which releases may run
// against the schema it leaves (docs/deploying.md, "What each migration
// allows"). A rolling deploy runs the previous release against every
// migration of the new one, so a migration that does not say whether it
// can is one nobody has checked.
const releasesHeader = "-- Releases: "

func TestEveryMigrationSaysWhichReleasesRunAgainstIt(t *testing.T) {
	files, err := filepath.Glob("*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no migrations found")
	}
	for _, file := range files {
		f, err := os.Open(file) //nolint:gosec // G304: a migration of this directory
		if err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(f).ReadString('\n')
		_ = f.Close()
		if err != nil {
			t.Errorf("%s: cannot read its first line: %v", file, err)
			continue
		}
		says, ok := strings.CutPrefix(strings.TrimSpace(line), releasesHeader)
		if !ok || strings.TrimSpace(says) == "" {
			t.Errorf("%s: its first line must be %q followed by which releases may run against it (docs/deploying.md); it is %q",
				file, releasesHeader+"...", strings.TrimSpace(line))
		}
	}
}
