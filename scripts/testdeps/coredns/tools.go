//go:build tools

// CoreDNS, built from the version the Gateway API conformance manifests name
// (registry.k8s.io/coredns/coredns:v1.12.2): scripts/image makes it that image.
package tools

import _ "github.com/coredns/coredns"
