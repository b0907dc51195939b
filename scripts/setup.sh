#!/usr/bin/env bash
# Installs what building, testing and running Rivora needs on a fresh Debian
# machine, and mounts bpffs; with --with-testdeps (scripts/test) also builds
# the Kubernetes tests' components (API server, scheduler, controller-manager, kubelet), containerd,
# etcd, helm and Gateway API's conformance suite. Idempotent: only what is
# missing is installed or built.
#
# Every external command that scripts/demo, scripts/test and rivora-bench run
# is listed here with its package (the tests and the bench still install a
# missing BGP daemon or trafgen themselves, for runs outside these scripts):
#   clang-19 (BPF objects), libbpf-dev + linux-libc-dev (headers), ip
#   (iproute2), sysctl (procps), nsenter/unshare/taskset/mount (util-linux), ethtool,
#   nft (nftables: the DSR and fib e2e tests' counters, the bench's DNAT
#   baseline, rivora-doctor's firewall check and its test), trafgen (netsniff-ng: the bench and the SYN-flood e2e test), bird/birdc, gobgpd/gobgp,
#   vtysh/bgpd (frr): the real BGP peers; python3 + PyYAML (python3, python3-yaml): the
#   installer's YAML 1.1 test; /usr/bin/time (time): the figures
#   of build-testdeps.sh, which builds the Kubernetes components, containerd, etcd and helm with Go;
#   runc (runc) and the CNI plugins (containernetworking-plugins: ptp, host-local, loopback) that
#   the test cluster's containerd runs pods with; gcc with glibc's static libc (gcc, libc6-dev):
#   scripts/image's static test images.
set -euo pipefail

with_testdeps=0
for arg in "$@"; do
  case "$arg" in
    --with-testdeps) with_testdeps=1 ;;
    *) echo "setup: unknown argument $arg (known: --with-testdeps)" >&2; exit 2 ;;
  esac
done

need=()
command -v clang-19 >/dev/null 2>&1 || need+=(clang-19 llvm-19)
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
[ -f /usr/include/linux/bpf.h ] || need+=(linux-libc-dev)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
compgen -G '/usr/lib/*/libc.a' >/dev/null || need+=(libc6-dev)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v sysctl >/dev/null 2>&1 || need+=(procps)
command -v ethtool >/dev/null 2>&1 || need+=(ethtool)
command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
command -v nft >/dev/null 2>&1 || need+=(nftables)
command -v trafgen >/dev/null 2>&1 || need+=(netsniff-ng)
# e2e_classifier_shapes.rs: captures (tcpdump), DF pings (ping), and SCTP in user space (usrsctp,
# loaded with dlopen: this kernel has no SCTP).
command -v tcpdump >/dev/null 2>&1 || need+=(tcpdump)
command -v ping >/dev/null 2>&1 || need+=(iputils-ping)
compgen -G '/usr/lib/*/libusrsctp.so.2' >/dev/null || need+=(libusrsctp2)
# crates/installer/tests/dry_run_yaml11.rs: PyYAML reads `rivora install --dry-run` as YAML 1.1.
command -v python3 >/dev/null 2>&1 || need+=(python3)
python3 -c 'import yaml' 2>/dev/null || need+=(python3-yaml)
# GNU time: build-testdeps.sh records the Go builds' time and peak memory with it.
[ -x /usr/bin/time ] || need+=(time)
# Real BGP peers for the speaker's interop tests.
command -v bird >/dev/null 2>&1 || need+=(bird2)
command -v gobgpd >/dev/null 2>&1 || need+=(gobgpd)
[ -x /usr/lib/frr/bgpd ] || need+=(frr)
# The test cluster's container runtime: containerd (built from its Go module by build-testdeps.sh)
# runs containers with Debian's runc and wires pods with Debian's CNI plugins.
{ command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ]; } || need+=(runc)
[ -x /usr/lib/cni/ptp ] || need+=(containernetworking-plugins)

if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup: missing packages ${need[*]}; run as root to install them" >&2
    exit 1
  fi
  echo "setup: installing ${need[*]}"
  # Quiet on success; the whole apt output on failure.
  aptlog=$(mktemp)
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends "${need[@]}"; } >"$aptlog" 2>&1; then
    cat "$aptlog" >&2
    rm -f "$aptlog"
    echo "setup: installing ${need[*]} failed (output above)" >&2
    exit 1
  fi
  rm -f "$aptlog"
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: no Rust toolchain (cargo) on PATH; Rivora needs Rust 1.95" >&2
  exit 1
fi

# A fresh machine has no bpffs at /sys/fs/bpf; the datapath pins its maps there.
if [ "$(id -u)" = 0 ] && [ "$(stat -f -c %T /sys/fs/bpf 2>/dev/null)" != "bpf_fs" ]; then
  mkdir -p /sys/fs/bpf
  mount -t bpf bpf /sys/fs/bpf
  echo "setup: mounted bpffs at /sys/fs/bpf"
fi

# The Kubernetes components, containerd, etcd, helm and the Gateway API CRDs for the Kubernetes tests (scripts/test passes
# --with-testdeps; the demo does not need them), built once into a cache outside the clone
# (keyed by version; a no-op when present).
if [ "$with_testdeps" = 1 ]; then
  "$(dirname "${BASH_SOURCE[0]}")/build-testdeps.sh"
fi
