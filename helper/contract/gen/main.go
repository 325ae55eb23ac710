// Command gen writes include/gym_otel_contract.h (the path is its one
// argument) from the Go constants; see package contract.
package main

import (
	"fmt"
	"os"

	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gen OUTPUT.h")
		os.Exit(2)
	}
	if err := os.WriteFile(os.Args[1], []byte(contract.Header()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
