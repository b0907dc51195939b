//go:build tools

// Package tools pins the Kubernetes commands Rivora's tests run so `go mod tidy` keeps their
// dependencies: the control plane (API server, scheduler, controller-manager) and the node agent.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
