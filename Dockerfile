# breakwater: a static binary on a distroless base, run as a non-root user.
#
#   docker build --build-arg VERSION=$(git describe --tags --always) \
#                --build-arg COMMIT=$(git rev-parse HEAD) -t breakwater .
#   docker run -p 8080:8080 -v $PWD/examples/providers.yaml:/etc/breakwater/config.yaml:ro \
#              -e BW_ADMIN_KEY=... -e BW_CLIENT_KEY=... -e OPENAI_API_KEY=... breakwater
#
# Listening on 0.0.0.0 requires clientKeys and a managementKey (the gateway
# refuses to start an open gateway on a non-loopback address).

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
      -o /out/breakwater ./cmd/breakwater

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/breakwater /usr/local/bin/breakwater
COPY examples/providers.yaml /etc/breakwater/config.yaml
USER nonroot:nonroot
ENV BREAKWATER_LISTEN=0.0.0.0:8080
EXPOSE 8080
# The image has no shell or curl: the binary probes its own /readyz.
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
  CMD ["/usr/local/bin/breakwater", "healthcheck", "-url", "http://127.0.0.1:8080/readyz"]
ENTRYPOINT ["/usr/local/bin/breakwater"]
CMD ["serve", "-config", "/etc/breakwater/config.yaml", "-log-format", "json"]
