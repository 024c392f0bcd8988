package pgtemp_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/example/payment-service/internal/pgtemp"
)

func TestStartServeStop(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts pgtemp.Options
	}{
		{"unix socket", pgtemp.Options{}},
		{"tcp", pgtemp.Options{TCPPort: freePort(t)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c, err := pgtemp.Start(ctx, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			conn, err := pgx.Connect(ctx, c.DSN("postgres"))
			if err != nil {
				c.Stop()
				t.Fatal(err)
			}
			var fsync string
			if err := conn.QueryRow(ctx, "SHOW fsync").Scan(&fsync); err != nil || fsync != "on" {
				t.Errorf("fsync = %q (%v), want on as in production", fsync, err)
			}
			conn.Close(ctx)
			c.Stop()
			if _, err := pgx.Connect(ctx, c.DSN("postgres")); err == nil {
				t.Fatal("server still answers after Stop")
			}
		})
	}
}

// If the process that started the cluster dies without calling Stop (a test
// binary killed by -timeout, a make dev killed hard), the server must not
// outlive it. A child copy of this test binary starts a cluster and is
// killed with SIGKILL; the server must go away by itself.
func TestServerStopsWhenOwnerIsKilled(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestServerStopsWhenOwnerIsKilled$") //nolint:gosec // G702: this test binary, run again as the child
	cmd.Env = append(os.Environ(), "PGTEMP_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var dsn, dir string
	if _, err := fmt.Fscanf(bufio.NewReader(out), "DSN=%s DIR=%s\n", &dsn, &dir); err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("child did not report its cluster: %v", err)
	}
	// Killed owners cannot remove their files; the server's exit is what
	// this test is about.
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		_ = cmd.Process.Kill()
		t.Fatal(err)
	}
	conn.Close(ctx)

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return // gone
		}
		c.Close(ctx)
		if time.Now().After(deadline) {
			t.Fatal("the server outlived its killed owner by 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestMain(m *testing.M) {
	if os.Getenv("PGTEMP_CHILD") == "1" {
		c, err := pgtemp.Start(context.Background(), pgtemp.Options{TCPPort: freePortOrDie()})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("DSN=%s DIR=%s\n", c.DSN("postgres"), c.Dir())
		time.Sleep(time.Minute) // killed long before
		c.Stop()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func freePort(t *testing.T) int {
	t.Helper()
	return freePortOrDie()
}

func freePortOrDie() int {
	// The kernel picks a free loopback port; PostgreSQL binds it right after.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Halt and Resume are a database outage: connections fail while the server
// is down, and every committed row is there again after it comes back, on
// the same address, after a fast shutdown and after a crash-like immediate
// one alike.
func TestHaltAndResumeKeepTheData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := pgtemp.Start(ctx, pgtemp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	exec := func(sql string) error {
		conn, err := pgx.Connect(ctx, c.DSN("postgres"))
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec(`CREATE TABLE kept (n int)`); err != nil {
		t.Fatal(err)
	}
	for i, mode := range []pgtemp.HaltMode{pgtemp.HaltFast, pgtemp.HaltImmediate} {
		if err := exec(fmt.Sprintf(`INSERT INTO kept VALUES (%d)`, i)); err != nil {
			t.Fatal(err)
		}
		if err := c.Halt(mode); err != nil {
			t.Fatalf("halt %d: %v", mode, err)
		}
		if err := exec(`SELECT 1`); err == nil {
			t.Fatalf("halt %d: the server still answers", mode)
		}
		if err := c.Resume(ctx); err != nil {
			t.Fatalf("resume after halt %d: %v", mode, err)
		}
		conn, err := pgx.Connect(ctx, c.DSN("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		var n int
		err = conn.QueryRow(ctx, `SELECT count(*) FROM kept`).Scan(&n)
		conn.Close(ctx)
		if err != nil || n != i+1 {
			t.Fatalf("after halt %d and resume: %d rows (%v), want %d", mode, n, err, i+1)
		}
	}
	if err := c.Resume(ctx); err == nil {
		t.Fatal("Resume of a running server succeeded")
	}
}

// With no PostgreSQL installed, every cluster runs from the binaries that
// pgtemp downloads (a fresh machine; docs/decisions/0023). Forced here with
// PGTEMP_BINARIES=download, so the downloaded binaries run in every
// `make test`, on machines that have PostgreSQL installed too: the first run
// downloads them into the cache, later runs reuse it.
func TestDownloadedBinariesRunACluster(t *testing.T) {
	t.Setenv(pgtemp.EnvBinaries, "download")
	ctx := context.Background()
	bindir, err := pgtemp.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(bindir, "/usr/") {
		t.Fatalf("BinDir() = %s, an installed PostgreSQL, with %s=download", bindir, pgtemp.EnvBinaries)
	}
	c, err := pgtemp.Start(ctx, pgtemp.Options{TCPPort: freePort(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var version string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil || version != "15.10" {
		t.Fatalf("server_version = %q (%v), want 15.10 from %s", version, err, bindir)
	}
	// The service's migrations need what the package's server has: the
	// pg_stat_statements extension the benchmarks preload is there too.
	if _, err := conn.Exec(ctx, "CREATE EXTENSION pg_stat_statements"); err != nil {
		t.Fatalf("pg_stat_statements from %s: %v", bindir, err)
	}
}
