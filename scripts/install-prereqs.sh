#!/usr/bin/env bash
# Installs what the suite needs and the machine lacks: Java 17 + Maven (Debian), python3 (the
# test runner), rustfmt/clippy, a nightly toolchain and cargo-fuzz (crates.io). Idempotent;
# prints what it does.
#   scripts/install-prereqs.sh          # everything scripts/test.sh needs
#   scripts/install-prereqs.sh --demo   # what scripts/demo.sh needs: Java 17 and Maven (the
#                                       # Kafka clusters and their jars), Go for Jaeger unless
#                                       # DEMO_TRACES=sink or STRAIT_JAEGER is set
set -euo pipefail
demo=0
case "${1:-}" in
  --demo) demo=1 ;;
  "") ;;
  *) echo "usage: $0 [--demo]" >&2; exit 2 ;;
esac
apt_install() {
  if command -v apt-get >/dev/null; then
    local sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@"
  else
    echo "missing $* and no apt-get: install them by hand" >&2; exit 1
  fi
}
command -v java >/dev/null || { echo "installing Java 17"; apt_install openjdk-17-jdk-headless; }
command -v mvn  >/dev/null || { echo "installing Maven"; apt_install maven; }
command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup (https://rustup.rs)" >&2; exit 1; }
if [ "$demo" = 1 ]; then
  if [ "${DEMO_TRACES:-jaeger}" = jaeger ] && [ -z "${STRAIT_JAEGER:-}" ]; then
    # Debian's Go; scripts/install-jaeger.sh says so when it is older than Jaeger needs.
    command -v go >/dev/null || { echo "installing Go (for Jaeger)"; apt_install golang-go; }
  fi
  exit 0
fi
command -v python3 >/dev/null || { echo "installing python3"; apt_install python3; }
# tests/kafka/secrets.rs makes encrypted keys and PKCS#12 stores with openssl, as users do.
command -v openssl >/dev/null || { echo "installing openssl"; apt_install openssl; }
cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt
cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
if [ "${STRAIT_FUZZ_SECONDS:-30}" != 0 ]; then
  # Fuzzing needs nightly and cargo-fuzz. If they cannot be installed here, scripts/fuzz.sh
  # says so loudly and the rest of the suite still runs.
  rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal \
    || echo "WARNING: no nightly toolchain and it cannot be installed; the fuzz step will be skipped" >&2
  command -v cargo-fuzz >/dev/null || { echo "installing cargo-fuzz"; cargo install cargo-fuzz --locked --quiet \
    || echo "WARNING: cargo-fuzz could not be installed; the fuzz step will be skipped" >&2; }
fi
