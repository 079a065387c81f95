# seckilld container image.
#   docker build -t seckilld .
# Stage 1 builds build/seckilld with the Makefile; stage 2 carries only the
# binary and its runtime libraries and runs it as an unprivileged user.
# Every library the binary links must be in both stages: make test runs
# scripts/check-dockerfile.sh, which compares them with the binary.

FROM debian:12 AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        build-essential pkg-config \
        libmicrohttpd-dev libjansson-dev libhiredis-dev \
        libmariadb-dev libmariadb-dev-compat libsodium-dev \
        libzookeeper-mt-dev libcurl4-openssl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make build

FROM debian:12-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        libmicrohttpd12 libjansson4 libhiredis0.14 libmariadb3 libsodium23 \
        libzookeeper-mt2 libcurl4 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin seckill
COPY --from=build /src/build/seckilld /usr/local/bin/seckilld
ENV SECKILL_BIND=0.0.0.0 \
    SECKILL_PORT=8080
EXPOSE 8080
USER seckill
ENTRYPOINT ["/usr/local/bin/seckilld"]
