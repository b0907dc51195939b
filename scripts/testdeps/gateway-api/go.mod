// Pins the Gateway API CRDs Rivora's tests install (copied from the module cache, never shipped). See scripts/build-testdeps.sh.
module rivora.dev/testdeps/gateway-api

go 1.26.0

require sigs.k8s.io/gateway-api v1.6.3
