package repository

import (
	"fmt"
	"regexp"
	"strconv"
)

// namedSQL is a statement written with @name parameters, as the hot path's
// statements are (charges.go), compiled once to PostgreSQL's $n
// placeholders.
//
// The charge's three statements go to GORM's connection pool
// (Statement.ConnPool: the *sql.DB, or the *sql.Tx inside Transact) as they
// are, without GORM's statement builder: they are hand-written SQL, which
// the builder only parses again on every call. The profile of a replay put
// the builder at about a third of the lookup's time.
type namedSQL struct {
	text  string   // with $1, $2, ...
	names []string // the parameter of each $n
}

var namedParameter = regexp.MustCompile(`@([a-z_]+)`)

// compileNamed numbers the parameters in order of first use; a name used
// twice is one parameter.
func compileNamed(sql string) namedSQL {
	q := namedSQL{}
	index := map[string]int{}
	q.text = namedParameter.ReplaceAllStringFunc(sql, func(m string) string {
		name := m[1:]
		n, ok := index[name]
		if !ok {
			q.names = append(q.names, name)
			n = len(q.names)
			index[name] = n
		}
		return "$" + strconv.Itoa(n)
	})
	return q
}

// args orders values by parameter number. A missing value is a mistake in
// the code calling the statement, reported as an error, never sent as NULL.
func (q namedSQL) args(values map[string]any) ([]any, error) {
	out := make([]any, len(q.names))
	for i, name := range q.names {
		v, ok := values[name]
		if !ok {
			return nil, fmt.Errorf("statement parameter @%s has no value", name)
		}
		out[i] = v
	}
	return out, nil
}
