# Static strait binary (musl) in a scratch image.
FROM rust:1.95-bookworm AS build
RUN apt-get update -qq && apt-get install -y -qq musl-tools && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
RUN cargo build --release --locked --target x86_64-unknown-linux-musl -p strait \
 && cp target/x86_64-unknown-linux-musl/release/strait /strait

FROM scratch
COPY --from=build /strait /strait
USER 65534:65534
EXPOSE 9464
ENTRYPOINT ["/strait"]
