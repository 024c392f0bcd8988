# Multi-stage build: static binaries (CGO_ENABLED=0) in small non-root images.
# The default target (the last stage) is the service; `--target
# sandbox-provider` builds the sandbox payment provider that docker compose
# runs next to it, and `--target payment-demo` the demo client that seeds
# compose's demo orders.
#
# Each image runs as 65532:65532, distroless's user "nonroot", given by
# number: Kubernetes' runAsNonRoot cannot tell whether a user name is root,
# so it refuses to start a container whose image's USER is a name.

# The base images, pinned by digest: the same Dockerfile builds on the same
# bases until someone changes a digest here, whatever the tags point to by
# then. The tag stays for the reader and for tools that bump digests. To
# refresh one, take the "Digest:" (the index of every platform) that
# `docker buildx imagetools inspect <image:tag>` prints for the tag.
# They are build arguments so that make compose-check, which can pull no
# image, can give its stand-ins (docs/compose-check.md).
ARG GO_IMAGE=golang:1.26-bookworm@sha256:9fdc884aacc3bec89b20ffc69f4bb369c78210e3e4f600387b5128b12c199f81
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot@sha256:f5b485ea962d9bd1186b2f6b3a061191539b905b82ec395de78cbfae51f20e35

FROM ${GO_IMAGE} AS build
WORKDIR /src
# Modules first, so the layer is cached while only the code changes; and
# only the modules the binaries link, at go.mod's versions. A bare
# `go mod download` fetches every module go.mod names, the tests' too:
# Prometheus's server, which deploy/'s tests use to check its config,
# brings cloud and Kubernetes clients that no binary links, more modules
# than the binaries need in all (docs/operations.md).
# deploy/image-modules.txt lists the binaries' modules; a test keeps it
# equal to what `go list -deps` finds for the binaries built below.
COPY go.mod go.sum deploy/image-modules.txt ./
RUN go mod download $(cat image-modules.txt)
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/payment-service ./cmd/payment-service && \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/sandbox-provider ./cmd/sandbox-provider && \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/payment-demo ./cmd/payment-demo

# The sandbox payment provider: a stand-in for a real provider, for dev and demos.
FROM ${RUNTIME_IMAGE} AS sandbox-provider
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
FROM ${RUNTIME_IMAGE} AS payment-demo
COPY --from=build /out/payment-demo /usr/local/bin/payment-demo
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/payment-demo"]

# The service: distroless/static, no shell, no package manager.
FROM ${RUNTIME_IMAGE} AS payment-service
COPY --from=build /out/payment-service /usr/local/bin/payment-service
USER 65532:65532
EXPOSE 8080
ENV HTTP_ADDR=:8080
# The image has no curl; the binary checks its own /readyz.
HEALTHCHECK --interval=5s --timeout=4s --start-period=10s --retries=5 \
  CMD ["/usr/local/bin/payment-service", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/payment-service"]
CMD ["serve"]
