#!/usr/bin/env bash
# Builds the test-only dependencies of Rivora's Kubernetes tests from their Go modules (the
# Kubernetes components, containerd, etcd, helm) and copies the Gateway API CRDs out of the Go
# module cache. Nothing here is shipped: the product stays Rust and C; these exist so tests talk to
# a real API server and run real kubelets instead of mocks.
#
# The exact versions live in scripts/testdeps/*/go.mod (and go.sum verifies every download). Results
# go to a cache outside the clone, one directory per tool and version, so a fresh clone reuses them
# and a version bump builds next to the old one:
#   ${RIVORA_TESTDEPS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rivora/testdeps}/kube-apiserver-v1.35.4/kube-apiserver
#   .../kube-controller-manager-v1.35.4/, .../kube-scheduler-v1.35.4/, .../kubelet-v1.35.4/
#   .../containerd-v2.4.2/{containerd,containerd-shim-runc-v2,ctr}
#   .../etcd-v3.6.16/etcd
#   .../helm-v3.21.4/helm   (only to check `rivora`'s own chart renderer against `helm template`)
#   .../gateway-api-v1.6.3/{standard,experimental}/*.yaml
#   .../gateway-conformance-v1.6.3/{gateway-conformance,echo-basic,coredns,images.txt}
#       (Gateway API's conformance suite as a test binary, the backends its manifests run, and
#       the image references those manifests name: scripts/image conformance builds them)
# Each directory appears only when complete (built in a temporary sibling, then renamed), and a lock
# keeps two concurrent runs from building the same thing twice. Present => nothing is done, silently.
# The first build's time and peak memory (GNU time -v) are kept in <dir>/build-stats.txt.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mods="$repo/scripts/testdeps"
cache="${RIVORA_TESTDEPS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rivora/testdeps}"

go_bin="$(command -v go || true)"
[ -n "$go_bin" ] || { [ -x /usr/local/go/bin/go ] && go_bin=/usr/local/go/bin/go; }
# Never let Go fetch another toolchain; never rewrite our go.mod/go.sum.
export GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0

# The version a go.mod requires for module $2 (the require line, not a replace line).
required_version() {
  awk -v m="$2" '
    $1 == "replace" || $1 == "tool" { skip = ($2 == "(") ; next }
    $1 == ")" { skip = 0; next }
    skip { next }
    { for (i = 1; i < NF; i++) if ($i == m && $(i + 1) ~ /^v[0-9]/) { print $(i + 1); exit } }' "$1"
}

need_go() {
  if [ -z "$go_bin" ]; then
    echo "build-testdeps: no Go toolchain (go on PATH or /usr/local/go/bin/go); it is needed once to build $1" >&2
    exit 1
  fi
}

# build_tool NAME MODDIR MODULE LDFLAGS PACKAGE...: `go build` each PACKAGE of scripts/testdeps/MODDIR
# into the cache directory NAME-<version of MODULE>: one PACKAGE gives the binary NAME, several give
# one binary each, named by Go (the package's last element). Built when every binary is there.
build_tool() {
  local name="$1" moddir="$2" module="$3" ldflags="$4"
  shift 4
  local packages=("$@") binaries=() version dir tmp b out
  if [ "${#packages[@]}" = 1 ]; then binaries=("$name"); else
    for b in "${packages[@]}"; do binaries+=("${b##*/}"); done
  fi
  version="$(required_version "$mods/$moddir/go.mod" "$module")"
  [ -n "$version" ] || { echo "build-testdeps: no version of $module in $mods/$moddir/go.mod" >&2; exit 1; }
  dir="$cache/$name-$version"
  built() {
    for b in "${binaries[@]}"; do [ -x "$dir/$b" ] || return 1; done
  }
  built && return 0
  need_go "$name"
  mkdir -p "$cache"
  exec 9>"$cache/.$name-$version.lock"
  flock 9
  if ! built; then
    echo "build-testdeps: building $name $version into $dir (first time only; takes minutes)" >&2
    tmp="$(mktemp -d "$cache/.$name-$version.XXXXXX")"
    # Build time and peak memory go to build-stats.txt when GNU time is there (setup.sh installs it).
    local timer=()
    out="$tmp/"
    [ "${#packages[@]}" = 1 ] && out="$tmp/$name"
    [ -x /usr/bin/time ] && timer=(/usr/bin/time -v -o "$tmp/build-stats.txt")
    if ! (cd "$mods/$moddir" && "${timer[@]}" \
        "$go_bin" build -trimpath -ldflags "-s -w $ldflags" -o "$out" "${packages[@]}") >"$tmp/build.log" 2>&1; then
      cat "$tmp/build.log" >&2
      rm -rf "$tmp"
      echo "build-testdeps: building $name $version failed" >&2
      exit 1
    fi
    rm -f "$tmp/build.log"
    rm -rf "$dir"
    mv "$tmp" "$dir"
  fi
  exec 9>&-
}

# copy_crds: the Gateway API CRDs of the version scripts/testdeps/gateway-api/go.mod pins.
copy_crds() {
  local module=sigs.k8s.io/gateway-api version dir tmp src
  version="$(required_version "$mods/gateway-api/go.mod" "$module")"
  dir="$cache/gateway-api-$version"
  [ -f "$dir/standard/gateway.networking.k8s.io_tcproutes.yaml" ] && return 0
  need_go "the Gateway API CRDs"
  mkdir -p "$cache"
  exec 9>"$cache/.gateway-api-$version.lock"
  flock 9
  if [ ! -f "$dir/standard/gateway.networking.k8s.io_tcproutes.yaml" ]; then
    src="$(cd "$mods/gateway-api" && "$go_bin" mod download -json "$module" | awk -F'"' '$2 == "Dir" { print $4 }')"
    [ -d "$src/config/crd/standard" ] || { echo "build-testdeps: $module $version has no config/crd/standard" >&2; exit 1; }
    tmp="$(mktemp -d "$cache/.gateway-api-$version.XXXXXX")"
    mkdir -p "$tmp/standard" "$tmp/experimental"
    cp "$src"/config/crd/standard/*.yaml "$tmp/standard/"
    cp "$src"/config/crd/experimental/*.yaml "$tmp/experimental/"
    rm -f "$tmp"/*/kustomization.yaml
    chmod -R u+w "$tmp"
    rm -rf "$dir"
    mv "$tmp" "$dir"
  fi
  exec 9>&-
}

# build_conformance: Gateway API's conformance suite as a test binary (`go test -c` of
# scripts/testdeps/gateway-conformance), the echo-basic server of the same module version, and
# CoreDNS (scripts/testdeps/coredns: the UDP backend the suite's manifests run) into
# gateway-conformance-<version>/, with images.txt: every image the suite's manifests name. The
# CoreDNS version pinned must be the one the manifests name (its image is built from it).
build_conformance() {
  local module=sigs.k8s.io/gateway-api/conformance version dir tmp src coredns_version timer=()
  version="$(required_version "$mods/gateway-conformance/go.mod" "$module")"
  dir="$cache/gateway-conformance-$version"
  conformance_built() {
    [ -x "$dir/gateway-conformance" ] && [ -x "$dir/echo-basic" ] && [ -x "$dir/coredns" ] && [ -s "$dir/images.txt" ]
  }
  conformance_built && return 0
  need_go "the Gateway API conformance suite"
  mkdir -p "$cache"
  exec 9>"$cache/.gateway-conformance-$version.lock"
  flock 9
  if ! conformance_built; then
    echo "build-testdeps: building the Gateway API conformance suite $version, echo-basic and CoreDNS into $dir (first time only; takes minutes)" >&2
    tmp="$(mktemp -d "$cache/.gateway-conformance-$version.XXXXXX")"
    src="$(cd "$mods/gateway-conformance" && "$go_bin" mod download -json "$module" | awk -F'"' '$2 == "Dir" { print $4 }')"
    grep -rhoE '^ *image: *[^ ]+' "$src/base" "$src/tests" | awk '{ print $2 }' | sort -u >"$tmp/images.txt"
    coredns_version="$(required_version "$mods/coredns/go.mod" github.com/coredns/coredns)"
    if ! grep -qx "registry.k8s.io/coredns/coredns:$coredns_version" "$tmp/images.txt"; then
      echo "build-testdeps: the conformance manifests name $(grep coredns "$tmp/images.txt" | tr '\n' ' ')but scripts/testdeps/coredns pins $coredns_version" >&2
      rm -rf "$tmp"
      exit 1
    fi
    [ -x /usr/bin/time ] && timer=(/usr/bin/time -v -o "$tmp/build-stats.txt")
    # One timed shell for the three builds (build-stats.txt covers them all).
    if ! "${timer[@]}" bash -c 'set -e
        cd "$1/gateway-conformance"
        "$2" test -c -trimpath -ldflags "-s -w" -o "$3/gateway-conformance" .
        "$2" build -trimpath -ldflags "-s -w" -o "$3/echo-basic" "$4/echo-basic"
        cd "$1/coredns"
        "$2" build -trimpath -ldflags "-s -w" -o "$3/coredns" github.com/coredns/coredns' \
        build "$mods" "$go_bin" "$tmp" "$module" >"$tmp/build.log" 2>&1; then
      cat "$tmp/build.log" >&2
      rm -rf "$tmp"
      echo "build-testdeps: building the Gateway API conformance suite $version failed" >&2
      exit 1
    fi
    rm -f "$tmp/build.log"
    rm -rf "$dir"
    mv "$tmp" "$dir"
  fi
  exec 9>&-
}

k8s_version="$(required_version "$mods/kubernetes/go.mod" k8s.io/kubernetes)"
k8s_minor="${k8s_version#v1.}"
k8s_minor="${k8s_minor%%.*}"
# What `kube-apiserver --version` and /version report; the Kubernetes build sets the same variables.
k8s_ldflags="-X k8s.io/component-base/version.gitVersion=$k8s_version \
-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$k8s_minor \
-X k8s.io/component-base/version.gitTreeState=clean \
-X k8s.io/client-go/pkg/version.gitVersion=$k8s_version \
-X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$k8s_minor"

build_tool etcd etcd go.etcd.io/etcd/server/v3 "" go.etcd.io/etcd/server/v3
# One directory per component (the API server alone serves the bare test bed); built one after the
# other, each reuses the packages the previous one compiled (Go's build cache).
for component in kube-apiserver kube-controller-manager kube-scheduler kubelet; do
  build_tool "$component" kubernetes k8s.io/kubernetes "$k8s_ldflags" "k8s.io/kubernetes/cmd/$component"
done
containerd_version="$(required_version "$mods/containerd/go.mod" github.com/containerd/containerd/v2)"
# The daemon, the runc shim it starts per pod, and ctr to import images; static (CGO off), which
# also leaves out the btrfs snapshotter (cgo only): the test nodes use overlayfs.
build_tool containerd containerd github.com/containerd/containerd/v2 \
  "-X github.com/containerd/containerd/v2/version.Version=$containerd_version" \
  github.com/containerd/containerd/v2/cmd/containerd \
  github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
  github.com/containerd/containerd/v2/cmd/ctr
copy_crds
helm_version="$(required_version "$mods/helm/go.mod" helm.sh/helm/v3)"
# What `helm version` reports; Helm's Makefile sets the same variable.
build_tool helm helm helm.sh/helm/v3 \
  "-X helm.sh/helm/v3/internal/version.version=$helm_version -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
  helm.sh/helm/v3/cmd/helm
build_conformance
