// Package api holds the service's OpenAPI contract, embedded in the binary
// so that GET /openapi.yaml serves the spec the service was built with.
package api

import _ "embed"

// OpenAPI is api/openapi.yaml as it was when the binary was built.
//
//go:embed openapi.yaml
var OpenAPI []byte
