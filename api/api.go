// Package api holds the service's contracts, embedded in the binary so that
// GET /openapi.yaml and GET /asyncapi.yaml serve the contracts the service
// was built with.
package api

import _ "embed"

// OpenAPI is api/openapi.yaml as it was when the binary was built.
//
//go:embed openapi.yaml
var OpenAPI []byte

// AsyncAPI is api/asyncapi.yaml, the contract of every Kafka topic the
// service reads or writes, as it was when the binary was built.
//
//go:embed asyncapi.yaml
var AsyncAPI []byte
