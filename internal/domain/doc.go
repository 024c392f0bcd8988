// Package domain holds the payment service's business types and rules.
//
// It knows nothing of HTTP, SQL or Kafka: it imports only the standard
// library, github.com/shopspring/decimal and github.com/google/uuid (make
// lint holds it to that). Constructors validate, so a value of these
// types is valid once built; adapters map their own structs to and from them.
package domain
