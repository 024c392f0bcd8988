package http

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/swaggest/swgui"
	"github.com/swaggest/swgui/v5emb"

	"github.com/example/payment-service/api"
)

// docsPath is where the interactive API page lives; its assets are under it.
const docsPath = "/docs"

// registerDocs serves the contract and a page to browse and try it. Neither
// needs an API key: reading the contract is not using the API. "Try it out"
// on the page sends the Bearer key the user types under Authorize, to this
// same service (the spec's server URL is relative).
//
// The page is Swagger UI from swaggest/swgui's v5emb package, whose assets
// are embedded in the binary: no CDN, so it works offline and behind a
// firewall, and it is the version go.mod pins. Swagger UI's online
// validator badge is off (validatorUrl null), so the page makes no request
// beyond this service.
func registerDocs(e *echo.Echo) {
	e.GET("/openapi.yaml", func(c echo.Context) error {
		return c.Blob(http.StatusOK, "application/yaml", api.OpenAPI)
	})
	page := echo.WrapHandler(v5emb.NewHandlerWithConfig(swgui.Config{
		Title:       "payment-service API",
		SwaggerJSON: "/openapi.yaml",
		BasePath:    docsPath,
		SettingsUI: map[string]string{
			// Show the request and response schemas, and keep what the user
			// typed under Authorize across reloads of the page.
			"defaultModelsExpandDepth": "1",
			"persistAuthorization":     "true",
		},
	}))
	e.GET(docsPath, page)
	e.GET(docsPath+"/*", page)
}
