package http

import (
	"crypto/sha256"
	"crypto/subtle"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/example/payment-service/internal/config"
	"github.com/example/payment-service/internal/domain"
)

const clientIDContextKey = "payment-service.client-id"

// authenticate checks `Authorization: Bearer <key>` against the configured
// keys. The comparison is constant-time over SHA-256 digests (equal length
// by construction) and visits every configured key, so neither the key's
// length nor which client matched leaks through timing.
func authenticate(keys []config.APIKey) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			scheme, token, ok := strings.Cut(c.Request().Header.Get(echo.HeaderAuthorization), " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
				return unauthorized()
			}
			digest := sha256.Sum256([]byte(token))
			client := ""
			for _, k := range keys {
				if subtle.ConstantTimeCompare(digest[:], k.KeyDigest[:]) == 1 {
					client = k.ClientID
				}
			}
			if client == "" {
				return unauthorized()
			}
			c.Set(clientIDContextKey, domain.ClientID(client))
			return next(c)
		}
	}
}

func clientID(c echo.Context) domain.ClientID {
	id, _ := c.Get(clientIDContextKey).(domain.ClientID)
	return id
}
