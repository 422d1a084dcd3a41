# The payments binary: `payments api`, `payments worker`, `payments migrate`, …
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/payments ./cmd/payments

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/payments /usr/local/bin/payments
ENTRYPOINT ["/usr/local/bin/payments"]
