package repository

import (
	"fmt"
	"strconv"
	"strings"
)

// namedSQL is a statement written with @name parameters, as the
// statements in statements/*.sql are, compiled once to PostgreSQL's $n
// placeholders.
//
// The hot path's statements go to GORM's connection pool
// (Statement.ConnPool: the *sql.DB, or the *sql.Tx inside Transact) as they
// are, without GORM's statement builder: they are hand-written SQL, which
// the builder only parses again on every call. The profile of a replay put
// the builder at about a third of the lookup's time.
type namedSQL struct {
	text  string   // with $1, $2, ...
	names []string // the parameter of each $n
}

// compileNamed numbers the parameters in order of first use; a name used
// twice is one parameter. An @name in a comment or a string literal is
// text, not a parameter: the statements' comments name their parameters.
// A statement that is nothing but comments and spaces (an empty file)
// panics, at package initialisation.
func compileNamed(sql string) namedSQL {
	q := namedSQL{}
	index := map[string]int{}
	var b strings.Builder
	code := false // the statement has something outside comments
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case strings.HasPrefix(sql[i:], "--"):
			end := strings.IndexByte(sql[i:], '\n')
			if end < 0 {
				end = len(sql) - i
			}
			b.WriteString(sql[i : i+end])
			i += end
		case c == '\'':
			end := i + 1
			for end < len(sql) && sql[end] != '\'' {
				end++
			}
			// A doubled quote inside the literal is two literals side by
			// side here, which leaves the same text.
			end = min(end+1, len(sql))
			b.WriteString(sql[i:end])
			i, code = end, true
		case c == '@' && i+1 < len(sql) && isNameByte(sql[i+1]):
			end := i + 1
			for end < len(sql) && isNameByte(sql[end]) {
				end++
			}
			name := sql[i+1 : end]
			n, ok := index[name]
			if !ok {
				q.names = append(q.names, name)
				n = len(q.names)
				index[name] = n
			}
			b.WriteString("$" + strconv.Itoa(n))
			i, code = end, true
		default:
			b.WriteByte(c)
			i++
			code = code || !isSpace(c)
		}
	}
	if !code {
		panic(fmt.Sprintf("an empty statement: %q", sql))
	}
	q.text = b.String()
	return q
}

// isNameByte: a parameter's name is lower-case letters and underscores.
func isNameByte(c byte) bool { return c >= 'a' && c <= 'z' || c == '_' }

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

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
