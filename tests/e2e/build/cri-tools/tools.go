//go:build tools

// Package tools pins crictl, the CRI client of the e2e suite.
package tools

import (
	_ "sigs.k8s.io/cri-tools/cmd/crictl"
)
