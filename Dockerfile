# Multi-stage build: static binaries (CGO_ENABLED=0) in small non-root images.
# The default target (the last stage) is the service; `--target
# sandbox-provider` builds the sandbox payment provider that docker compose
# runs next to it, and `--target payment-demo` the demo client that seeds
# compose's demo orders.
#
# Each image runs as 65532:65532, distroless's user "nonroot", given by
# number: Kubernetes' runAsNonRoot cannot tell whether a user name is root,
# so it refuses to start a container whose image's USER is a name.

FROM golang:1.26-bookworm AS build
WORKDIR /src
# Modules first, so the layer is cached while only the code changes.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/payment-service ./cmd/payment-service && \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/sandbox-provider ./cmd/sandbox-provider && \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/payment-demo ./cmd/payment-demo

# The sandbox payment provider: a stand-in for a real provider, for dev and demos.
FROM gcr.io/distroless/static-debian12:nonroot AS sandbox-provider
COPY --from=build /out/sandbox-provider /usr/local/bin/sandbox-provider
USER 65532:65532
EXPOSE 8081
ENV SANDBOX_ADDR=:8081
HEALTHCHECK --interval=5s --timeout=4s --start-period=5s --retries=5 \
  CMD ["/usr/local/bin/sandbox-provider", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/sandbox-provider"]
CMD ["serve"]

# The demo client (cmd/payment-demo). Compose runs it once as seed-orders
# (`payment-demo -seed-orders`): it publishes the tour's orders (docs/tour.md).
FROM gcr.io/distroless/static-debian12:nonroot AS payment-demo
COPY --from=build /out/payment-demo /usr/local/bin/payment-demo
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/payment-demo"]

# The service: distroless/static, no shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot AS payment-service
COPY --from=build /out/payment-service /usr/local/bin/payment-service
USER 65532:65532
EXPOSE 8080
ENV HTTP_ADDR=:8080
# The image has no curl; the binary checks its own /readyz.
HEALTHCHECK --interval=5s --timeout=4s --start-period=10s --retries=5 \
  CMD ["/usr/local/bin/payment-service", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/payment-service"]
CMD ["serve"]
