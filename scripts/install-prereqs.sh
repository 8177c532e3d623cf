#!/usr/bin/env bash
# Installs what the suite needs and the machine lacks: Java 17 + Maven (Debian), rustfmt/clippy,
# a nightly toolchain and cargo-fuzz (crates.io). Idempotent; prints what it does.
set -euo pipefail
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
# tests/kafka/secrets.rs makes encrypted keys and PKCS#12 stores with openssl, as users do.
command -v openssl >/dev/null || { echo "installing openssl"; apt_install openssl; }
command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup (https://rustup.rs)" >&2; exit 1; }
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
