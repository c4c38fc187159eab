# syntax=docker/dockerfile:1.7
# Tenantplane image: the `tenantplane` binary (`serve|worker|controller|migrate|token mint …`) and
# `tenantplane-authn-check`, which serve runs on tenant JWT authenticators.
#   docker build -t tenantplane/tenantplane:0.1.0 .

FROM rust:1.95-slim-bookworm AS builder
# protobuf-compiler: etcd-client compiles etcd's protos at build time.
RUN apt-get update \
 && apt-get install -y --no-install-recommends protobuf-compiler pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /build
# Queries are checked against the committed .sqlx/ data: no database at build time.
ENV SQLX_OFFLINE=true
COPY Cargo.toml Cargo.lock ./
COPY .sqlx ./.sqlx
COPY migrations ./migrations
COPY src ./src
COPY crates ./crates
COPY benches ./benches
COPY tests ./tests
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/build/target \
    cargo build --release --locked --bin tenantplane \
 && cp target/release/tenantplane /usr/local/bin/tenantplane

# kube-apiserver's own check of tenant JWT authenticators (serve runs it; tools/authn-check).
FROM golang:1.26-bookworm AS authn-check
WORKDIR /src
COPY tools/authn-check ./
RUN CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o /usr/local/bin/tenantplane-authn-check .

FROM debian:bookworm-slim AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 tenantplane \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin tenantplane
COPY --from=builder /usr/local/bin/tenantplane /usr/local/bin/tenantplane
COPY --from=authn-check /usr/local/bin/tenantplane-authn-check /usr/local/bin/tenantplane-authn-check
USER 65532:65532
ENV TENANTPLANE_LISTEN=0.0.0.0:8080 \
    TENANTPLANE_LOG_FORMAT=json
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/tenantplane"]
CMD ["serve"]
