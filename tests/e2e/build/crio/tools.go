//go:build tools

// Package tools pins CRI-O, the second NRI runtime of the e2e suite.
package tools

import (
	_ "github.com/cri-o/cri-o/cmd/crio"
)
