// Package pgtemp starts a throwaway PostgreSQL cluster and removes it
// afterwards. The server binaries are the installed ones (Debian's
// postgresql package) where there are any, else PostgreSQL 15 downloaded
// once from a Maven repository, checked against a pinned checksum and kept
// in the user's cache (download.go; docs/decisions/0023-postgresql-binaries.md).
//
// Tests use it through internal/testdb, and `make dev` uses it to run the
// service with no Docker. The cluster runs with production durability (fsync
// on); only initdb skips its own sync, because a cluster that dies with the
// test has nothing to protect.
//
// PostgreSQL refuses to run as root, and CI runs as root: when the process is
// root, the cluster's files are handed to the unprivileged `postgres` system
// user (or `nobody` on a machine without PostgreSQL's package) and the
// server runs under that uid. As a normal user it runs as that
// user. Either way the superuser role is called "postgres".
package pgtemp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Options tunes a cluster. The zero value is a unix-socket-only cluster,
// which is what tests want: no TCP port can collide.
type Options struct {
	// TCPPort, when non-zero, also listens on 127.0.0.1:TCPPort.
	TCPPort int
	// Log receives the server's output; nil discards it.
	Log *os.File
	// StartTimeout bounds initdb plus start-up; zero means 60 s.
	StartTimeout time.Duration
	// Settings are extra server settings (postgres -c name=value), such as
	// shared_preload_libraries=pg_stat_statements for a benchmark.
	Settings map[string]string
}

// Cluster is a running throwaway PostgreSQL server.
type Cluster struct {
	dir     string // holds data/ and the unix socket
	tcpPort int
	bindir  string
	cred    *syscall.Credential // nil: run as this process's user
	opts    Options

	mu     sync.Mutex // guards cmd and exited: Halt and Resume replace them
	cmd    *exec.Cmd
	exited chan struct{}
}

// socketPort is the port number in the unix socket's file name
// (.s.PGSQL.<port>); with no TCP listener it can always be the default.
const socketPort = 5432

// Superuser is the role initdb creates.
const Superuser = "postgres"

// ErrBinariesNotFound says the PostgreSQL server binaries are not installed.
var ErrBinariesNotFound = errors.New("pgtemp: PostgreSQL server binaries (initdb, postgres) not found")

// Start runs initdb into a new temporary directory and starts the server.
// The caller must call Stop.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 60 * time.Second
	}
	// Before the start's bound: the first run may download the binaries.
	bindir, err := findBinDir(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()

	dir, err := os.MkdirTemp("", "pgtemp-")
	if err != nil {
		return nil, fmt.Errorf("pgtemp: temp dir: %w", err)
	}
	c := &Cluster{dir: dir, tcpPort: opts.TCPPort, bindir: bindir, opts: opts}
	fail := func(err error) (*Cluster, error) {
		_ = os.RemoveAll(dir)
		return nil, err
	}

	c.cred, err = runAsCredential(dir)
	if err != nil {
		return fail(err)
	}

	initdb := exec.CommandContext(ctx, filepath.Join(bindir, "initdb"),
		"-D", c.dataDir(), "-U", Superuser, "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("pgtemp: initdb: %w\n%s", err, out))
	}
	if err := c.startServer(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// startServer runs postgres on the cluster's data directory and waits until
// it accepts connections.
func (c *Cluster) startServer(ctx context.Context) error {
	listen := ""
	port := socketPort
	if c.tcpPort != 0 {
		listen, port = "127.0.0.1", c.tcpPort
	}
	// The server is a direct child, not daemonised by pg_ctl, so that
	// Pdeathsig can stop it if this process dies without calling Stop
	// (a test binary killed by -timeout, a Ctrl-C'd `make dev`).
	cmd := exec.Command(filepath.Join(c.bindir, "postgres"),
		"-D", c.dataDir(),
		"-k", c.dir,
		"-p", strconv.Itoa(port),
		"-c", "listen_addresses="+listen,
		"-c", "max_connections=300",
		"-c", "fsync=on",
	)
	for _, name := range slices.Sorted(maps.Keys(c.opts.Settings)) {
		cmd.Args = append(cmd.Args, "-c", name+"="+c.opts.Settings[name])
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGINT, Setpgid: true}
	if c.opts.Log != nil {
		cmd.Stdout, cmd.Stderr = c.opts.Log, c.opts.Log
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtemp: start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	c.mu.Lock()
	c.cmd, c.exited = cmd, exited
	c.mu.Unlock()
	return c.waitReady(ctx, exited)
}

// HaltMode is how Halt stops the server.
type HaltMode int

const (
	// HaltFast is PostgreSQL's fast shutdown (SIGINT): sessions are ended,
	// a checkpoint is written.
	HaltFast HaltMode = iota
	// HaltImmediate is its immediate shutdown (SIGQUIT): every process
	// exits at once, as in a crash; the next start replays the WAL.
	HaltImmediate
)

// Halt stops the server and keeps its files, so that Resume can start it
// again with every committed row: a database outage in the middle of a
// test. Clients see their connections end and new ones refused until
// Resume.
func (c *Cluster) Halt(mode HaltMode) error {
	c.mu.Lock()
	cmd, exited := c.cmd, c.exited
	c.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return errors.New("pgtemp: not running")
	}
	sig := syscall.SIGINT
	if mode == HaltImmediate {
		sig = syscall.SIGQUIT
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("pgtemp: halt: %w", err)
	}
	select {
	case <-exited:
		return nil
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		return errors.New("pgtemp: halt: the server ignored the signal for 30s and was killed")
	}
}

// Resume starts a halted server again on the same files, socket and port,
// and waits until it accepts connections (bounded by StartTimeout).
func (c *Cluster) Resume(ctx context.Context) error {
	c.mu.Lock()
	exited := c.exited
	c.mu.Unlock()
	select {
	case <-exited:
	default:
		return errors.New("pgtemp: resume: the server is running")
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	return c.startServer(ctx)
}

// Dir is the directory holding the cluster's files and socket.
func (c *Cluster) Dir() string { return c.dir }

func (c *Cluster) dataDir() string { return filepath.Join(c.dir, "data") }

// DSN returns a connection URL for the named database. With a TCP port it
// points at 127.0.0.1, otherwise at the unix socket.
func (c *Cluster) DSN(database string) string {
	u := url.URL{Scheme: "postgres", User: url.User(Superuser), Path: "/" + database}
	q := url.Values{}
	q.Set("sslmode", "disable")
	if c.tcpPort != 0 {
		u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(c.tcpPort))
	} else {
		q.Set("host", c.dir)
		q.Set("port", strconv.Itoa(socketPort))
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Stop shuts the server down (fast shutdown, then kill after 30 s) and
// removes its files. It is safe to call more than once.
func (c *Cluster) Stop() {
	// A server that is not running (never started, halted, crashed) makes
	// Halt fail at once; its files go all the same.
	_ = c.Halt(HaltFast)
	_ = os.RemoveAll(c.dir)
}

func (c *Cluster) waitReady(ctx context.Context, exited <-chan struct{}) error {
	var lastErr error
	for {
		conn, err := pgconn.Connect(ctx, c.DSN("postgres"))
		if err == nil {
			return conn.Close(ctx)
		}
		lastErr = err
		select {
		case <-exited:
			return fmt.Errorf("pgtemp: postgres exited during start-up (last connect error: %w)", lastErr)
		case <-ctx.Done():
			return fmt.Errorf("pgtemp: postgres not ready: %w (last connect error: %w)", ctx.Err(), lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// runAsCredential returns the uid/gid the server must run as: nil (this
// process's own) for a normal user; for root, the `postgres` system user
// that Debian's postgresql package creates, else `nobody`, which every
// Debian system has (a fresh machine running the downloaded binaries). For
// root it also hands dir to that user.
func runAsCredential(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		u, err = user.Lookup("nobody")
	}
	if err != nil {
		return nil, fmt.Errorf("pgtemp: running as root, and PostgreSQL refuses root; "+
			"neither the `postgres` nor the `nobody` user exists to run it: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, fmt.Errorf("pgtemp: chown %s: %w", dir, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// BinDir is the directory of the PostgreSQL server binaries in use (initdb,
// postgres), found as Start finds it. Only installed binaries include
// pgbench.
func BinDir() (string, error) { return findBinDir(context.Background()) }

// InstalledBinDir is the directory of the installed server binaries, as
// Start finds them when it prefers installed ones (initdb on PATH, else
// the newest /usr/lib/postgresql/*/bin); false if none is installed.
// Clients such as pgbench sit beside them.
func InstalledBinDir() (string, bool) { return installedBinDir() }

// findBinDir locates initdb and postgres: $PG_BINDIR if set; else, as
// $PGTEMP_BINARIES says (unset: the first that has them), the installed
// ones (PATH, where both must sit side by side, then the newest
// /usr/lib/postgresql/*/bin) or the downloaded ones. Installed ones come
// first: no download, the version the machine's package keeps patched, and
// a CI that installs postgresql runs as it always has (decision 0023).
func findBinDir(ctx context.Context) (string, error) {
	if dir := os.Getenv("PG_BINDIR"); dir != "" {
		if hasServerBinaries(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("%w (PG_BINDIR=%s has no initdb and postgres)", ErrBinariesNotFound, dir)
	}
	switch mode := os.Getenv(EnvBinaries); mode {
	case "":
		if dir, ok := installedBinDir(); ok {
			return dir, nil
		}
		return downloadedBinDir(ctx)
	case "installed":
		if dir, ok := installedBinDir(); ok {
			return dir, nil
		}
		return "", fmt.Errorf("%w: install the Debian package `postgresql` (apt-get install postgresql), "+
			"or unset %s to download them", ErrBinariesNotFound, EnvBinaries)
	case "download":
		return downloadedBinDir(ctx)
	default:
		return "", fmt.Errorf("pgtemp: %s=%q: want installed, download or nothing", EnvBinaries, mode)
	}
}

func hasServerBinaries(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.IsDir() { //nolint:gosec // G703: the machine's own setting or pgtemp's cache, only looked at
			return false
		}
	}
	return true
}

func installedBinDir() (string, bool) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && hasServerBinaries(filepath.Dir(real)) {
			return filepath.Dir(real), true
		}
	}
	candidates, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(candidates, func(i, j int) bool { return majorOf(candidates[i]) > majorOf(candidates[j]) })
	for _, dir := range candidates {
		if hasServerBinaries(dir) {
			return dir, true
		}
	}
	return "", false
}

func majorOf(bindir string) int {
	n, _ := strconv.Atoi(strings.Split(filepath.Base(filepath.Dir(bindir)), ".")[0])
	return n
}
