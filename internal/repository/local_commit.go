package repository

import (
	"errors"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
)

// errCommittedLocallyOnly: a commit waited for the synchronous standby and
// the wait was cancelled. PostgreSQL then answers the commit as done, with
// only a warning, though the standby may not have it: a failover to the
// standby takes it away. Its outcome is unknown, so the statement fails as
// the database being unavailable (503, the client retries, the key's
// record or the completer tells what happened), never as done.
var errCommittedLocallyOnly = errors.New("the commit was cancelled while it waited for the synchronous standby: " +
	"committed on the primary only, its outcome unknown")

// committedLocallyOnly holds the connections on which such a warning came,
// until the statement that got it looks (takeLocalOnly). A warning is rare
// (an operator's pg_cancel_backend, a pooler forwarding a cancel), so the
// set is nearly always empty.
var committedLocallyOnly sync.Map // *pgconn.PgConn -> struct{}

// noteLocalOnlyCommit is the pool's OnNotice: it marks the connection when
// the notice is PostgreSQL's warning that a commit's wait for the
// synchronous standby was cancelled. It runs on the goroutine that runs the
// statement, before the statement returns.
func noteLocalOnlyCommit(c *pgconn.PgConn, n *pgconn.Notice) {
	if strings.Contains(n.Message, "wait for synchronous replication") && strings.Contains(n.Detail, "committed locally") {
		committedLocallyOnly.Store(c, struct{}{})
	}
}

// takeLocalOnly reports (and forgets) whether a commit on c was answered
// with that warning since the last look.
func takeLocalOnly(c *pgconn.PgConn) bool {
	_, ok := committedLocallyOnly.LoadAndDelete(c)
	return ok
}
