# syntax=docker/dockerfile:1
# Multi-stage build: a static binary (CGO_ENABLED=0) in a small non-root image.

FROM golang:1.26-bookworm AS build
WORKDIR /src
# Modules first, so the layer is cached while only the code changes.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/payment-service ./cmd/payment-service

# distroless/static: no shell, no package manager, uid 65532 ("nonroot").
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/payment-service /usr/local/bin/payment-service
USER nonroot:nonroot
EXPOSE 8080
ENV HTTP_ADDR=:8080
# The image has no curl; the binary checks its own /readyz.
HEALTHCHECK --interval=5s --timeout=4s --start-period=10s --retries=5 \
  CMD ["/usr/local/bin/payment-service", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/payment-service"]
CMD ["serve"]
