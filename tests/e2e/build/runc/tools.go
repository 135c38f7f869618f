//go:build tools

// Package tools pins the runc release built for the e2e suite: a runc that applies the
// OCI `linux.memoryPolicy` (set_mempolicy, runc 1.4.0+; Debian's runc is older).
// tests/e2e/containerd.py builds it with `go build -o ... <package>`.
package tools

import (
	_ "github.com/opencontainers/runc"
)
