#!/usr/bin/env python3
"""Keeps the compiled third-party crates of the test build between runs (scripts/test.sh).

A clean clone has an empty target directory, so every run used to compile the ~300 crates of
crates.io again (the same sources, the same compiler, the same flags) before the first test could
start. Like the Go tools and the fuzz build, their artifacts are cached in ~/.cache/strait:

* `save TARGET CACHE`: after a successful build, copies TARGET/debug's artifacts of every crate
  that is not a workspace target (deps/, build/, .fingerprint/; never incremental/, which only
  the workspace's crates use) to CACHE, keyed by the compiler (`rustc -vV`), Cargo.lock and
  Cargo.toml (profiles, features). Under the same key only what CACHE lacks is added (the
  suite saves right after the test build, then once more after the `aws-sdk` feature's build);
  a new key replaces the old cache as a whole (written beside it, then renamed), so it does not
  grow from one dependency update to the next.
* `restore TARGET CACHE`: into a target directory that has no build yet, copies the cache if its
  key is the current one.

Cargo decides what is fresh, as always: its fingerprints of registry crates hold paths relative
to the registry and the target root (a build script's output dir is rewritten when the target
directory moved), so the copied artifacts are reused exactly when cargo would have reused them
in place, and anything that changed is rebuilt. Workspace crates are never cached: their
fingerprints depend on the clone's path and their sources change.
"""

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

# Fingerprints first: an artifact whose fingerprint is copied was complete before it (cargo
# writes a unit's fingerprint after its outputs), and one without it is rebuilt, not trusted.
KINDS = (".fingerprint", "build", "deps")
HASHED = re.compile(r"^(?:lib)?(?P<name>.+?)-[0-9a-f]{16}(?:\..*)?$")


def key(root):
    h = hashlib.sha256()
    h.update(subprocess.run(["rustc", "-vV"], capture_output=True, check=True).stdout)
    for name in ("Cargo.lock", "Cargo.toml"):
        with open(os.path.join(root, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def workspace_names(root):
    """Package and target names of the workspace, in both spellings (dashes, underscores)."""
    out = subprocess.run(
        ["cargo", "metadata", "--no-deps", "--offline", "--format-version", "1"],
        cwd=root, capture_output=True, check=True, text=True,
    ).stdout
    names = set()
    for p in json.loads(out)["packages"]:
        names.add(p["name"])
        names.update(t["name"] for t in p["targets"])
    return names | {n.replace("-", "_") for n in names} | {n.replace("_", "-") for n in names}


def third_party(entry, workspace):
    m = HASHED.match(entry)
    return bool(m) and m["name"] not in workspace


def read_key(cache):
    try:
        with open(os.path.join(cache, "KEY")) as f:
            return f.read().strip()
    except OSError:
        return None


def save(root, target, cache):
    want = key(root)
    workspace = workspace_names(root)
    current = read_key(cache) == want
    # A new key: written beside the old cache, then renamed over it (never a half cache).
    dest = cache if current else f"{cache}.new.{os.getpid()}"
    if not current:
        shutil.rmtree(dest, ignore_errors=True)
    count = 0
    for kind in KINDS:
        src = os.path.join(target, "debug", kind)
        if not os.path.isdir(src):
            continue
        os.makedirs(os.path.join(dest, kind), exist_ok=True)
        have = set(os.listdir(os.path.join(dest, kind)))
        for entry in os.listdir(src):
            if entry in have or not third_party(entry, workspace):
                continue
            a, b = os.path.join(src, entry), os.path.join(dest, kind, entry)
            # Beside the final name first: an interrupted copy never looks complete.
            part = f"{b}.part"
            if os.path.isdir(a):
                shutil.copytree(a, part, symlinks=True)
            else:
                shutil.copy2(a, part)
            os.rename(part, b)
            count += 1
    if current:
        print(f"rust-deps-cache: {count} new artifacts of third-party crates added to {cache}")
        return
    with open(os.path.join(dest, "KEY"), "w") as f:
        f.write(want + "\n")
    old = f"{cache}.old.{os.getpid()}"
    if os.path.exists(cache):
        os.rename(cache, old)
    os.rename(dest, cache)
    shutil.rmtree(old, ignore_errors=True)
    print(f"rust-deps-cache: saved {count} artifacts of third-party crates to {cache}")


def restore(root, target, cache):
    if os.path.isdir(os.path.join(target, "debug", ".fingerprint")):
        print("rust-deps-cache: the target directory has a build; cargo takes it from there")
        return
    if read_key(cache) != key(root):
        print(f"rust-deps-cache: no cache for this compiler and Cargo.lock in {cache}; building all")
        return
    for kind in KINDS:
        src = os.path.join(cache, kind)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(target, "debug", kind), symlinks=True, dirs_exist_ok=True)
    print(f"rust-deps-cache: restored the third-party crates' build from {cache}")


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("save", "restore"):
        print("usage: rust-deps-cache.py save|restore TARGET_DIR CACHE_DIR", file=sys.stderr)
        return 2
    op, target, cache = sys.argv[1:]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.makedirs(os.path.dirname(os.path.abspath(cache)), exist_ok=True)
    # One run at a time saves or restores (two suites on one machine share the cache).
    with open(f"{cache}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        (save if op == "save" else restore)(root, target, cache)
    return 0


if __name__ == "__main__":
    sys.exit(main())
