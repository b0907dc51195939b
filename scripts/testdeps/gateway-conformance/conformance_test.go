// The Gateway API conformance suite as a test binary (`go test -c`), configured by its own flags
// (-gateway-class, -conformance-profiles, -supported-features, -report-output, ...): Rivora's
// Gateway API test runs it against the test cluster. Nothing here is shipped.
package conformance_test

import (
	"testing"

	"sigs.k8s.io/gateway-api/conformance"
)

func TestConformance(t *testing.T) {
	conformance.RunConformance(t)
}
