// Package payments holds what the repository root publishes: the OpenAPI contract of the HTTP API.
package payments

import _ "embed"

// OpenAPI is openapi.yaml, served at GET /openapi.yaml and checked against the handlers in tests.
//
//go:embed openapi.yaml
var OpenAPI []byte
