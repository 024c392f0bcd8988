// Command pgtemp-binaries prints the directory of the PostgreSQL server
// binaries that internal/pgtemp uses, downloading them first where none are
// installed. `make test` runs it before the tests: unpacking the download
// in a test binary built with -race, on a machine without xz, takes
// minutes instead of seconds.
package main

import (
	"fmt"
	"os"

	"github.com/example/payment-service/internal/pgtemp"
)

func main() {
	dir, err := pgtemp.BinDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(dir)
}
