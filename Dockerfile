# Static strait binary (musl) in a scratch image, for linux/amd64 and linux/arm64.
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg STRAIT_GIT_COMMIT=$(git rev-parse --short=12 HEAD) \
#     -t <registry>/strait:0.1.0 --push .
#
# Each platform is built natively (buildx runs the other one under QEMU, slower but with the
# platform's own musl C toolchain, which ring and zstd need). CA roots: the binary carries
# Mozilla's (webpki-roots) and trusts them when no ssl.ca.location is set and the image has no
# system bundle (docs/security.md). .git is not in the build context: pass the commit for
# `strait --version` as STRAIT_GIT_COMMIT. Optional cargo features of strait: STRAIT_FEATURES,
# e.g. `--build-arg STRAIT_FEATURES=aws-sdk` for MSK IAM credentials from the AWS SDK's chain
# (instance/container roles, EKS Pod Identity, SSO, AssumeRole; docs/security.md). Without it
# (the default) the image has the built-in chain and is smaller.
FROM rust:1.95-bookworm AS build
# Set by BuildKit/buildx; a legacy `docker build` leaves it empty: the build machine's arch.
ARG TARGETARCH
ARG STRAIT_GIT_COMMIT=unknown
ARG STRAIT_FEATURES=
RUN arch="${TARGETARCH:-$(dpkg --print-architecture)}" \
 && case "$arch" in \
      amd64) echo x86_64-unknown-linux-musl ;; \
      arm64) echo aarch64-unknown-linux-musl ;; \
      *) echo "unsupported TARGETARCH $arch: build for linux/amd64 or linux/arm64" >&2; exit 1 ;; \
    esac > /rust-target \
 && apt-get update -qq && apt-get install -y -qq musl-tools \
 && rustup target add "$(cat /rust-target)"
WORKDIR /src
COPY . .
RUN target="$(cat /rust-target)" \
 && STRAIT_GIT_COMMIT="$STRAIT_GIT_COMMIT" cargo build --release --locked --target "$target" -p strait \
    ${STRAIT_FEATURES:+--features "$STRAIT_FEATURES"} \
 && cp "target/$target/release/strait" /strait

# `--target demo`: the traced producer and consumer of the reference scenario (strait-demo), for
# docker-compose.yml. Not part of the strait image.
FROM build AS demo-build
RUN target="$(cat /rust-target)" \
 && cargo build --release --locked --target "$target" -p strait-demo \
 && cp "target/$target/release/strait-demo" /strait-demo

FROM scratch AS demo
COPY --from=demo-build /strait-demo /strait-demo
USER 65534:65534
ENTRYPOINT ["/strait-demo"]

# The strait image (the default, last stage).
FROM scratch
COPY --from=build /strait /strait
USER 65534:65534
EXPOSE 9464
ENTRYPOINT ["/strait"]
