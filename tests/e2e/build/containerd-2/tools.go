//go:build tools

// Package tools pins the containerd 2.x commands built for the e2e suite.
// tests/e2e/containerd.py builds each with `go build -o ... <package>`.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
