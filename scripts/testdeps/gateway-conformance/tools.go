//go:build tools

// The conformance suite's backend server, built from the same module version as the suite:
// scripts/image makes it the echo-basic image the suite's manifests name.
package tools

import _ "sigs.k8s.io/gateway-api/conformance/echo-basic"
