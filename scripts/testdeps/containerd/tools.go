//go:build tools

// Package tools pins containerd's commands so `go mod tidy` keeps their dependencies: the daemon
// each test node runs, the runc shim it starts per pod, and ctr to import locally built images.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
