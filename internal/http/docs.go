package http

import (
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/swaggest/swgui"
	"github.com/swaggest/swgui/v5emb"

	"github.com/example/payment-service/api"
)

// docsPath is where the interactive API page lives; its assets are under it.
const docsPath = "/docs"

// registerDocs serves the contracts (the HTTP API's and the Kafka topics'),
// a page to browse and try the API, and the page that documents every
// problem code. None needs an API key: reading the contract is not using the API. "Try it out"
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
		c.Response().Header().Set(echo.HeaderXContentTypeOptions, "nosniff")
		return c.Blob(http.StatusOK, "application/yaml", api.OpenAPI)
	})
	e.GET("/asyncapi.yaml", func(c echo.Context) error {
		c.Response().Header().Set(echo.HeaderXContentTypeOptions, "nosniff")
		return c.Blob(http.StatusOK, "application/yaml", api.AsyncAPI)
	})
	ui := v5emb.NewHandlerWithConfig(swgui.Config{
		Title:       "payment-service API",
		SwaggerJSON: "/openapi.yaml",
		BasePath:    docsPath,
		SettingsUI: map[string]string{
			// Show the request and response schemas.
			"defaultModelsExpandDepth": "1",
			// The key typed under Authorize is a secret: it lives in the
			// page's memory and goes with the page. Persisted, it would sit
			// in the browser's localStorage, readable by any script of this
			// origin and left behind on a shared machine.
			"persistAuthorization": "false",
		},
	})
	page := echo.WrapHandler(withHeaders(ui, pageSecurityHeaders(ui)))
	e.GET(docsPath, page)
	e.GET(docsPath+"/*", page)

	// The problem page is plain HTML, no script, no style: it may load
	// nothing at all.
	problems := withHeaders(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
		_, _ = w.Write(problemsPage)
	}), map[string]string{
		echo.HeaderContentSecurityPolicy: "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
		echo.HeaderXFrameOptions:         "DENY",
		echo.HeaderXContentTypeOptions:   "nosniff",
		echo.HeaderReferrerPolicy:        "no-referrer",
	})
	e.GET(problemDocsPath, echo.WrapHandler(problems))
}

// problemsPage documents every problem code, each under an anchor named by
// the code (problemDocsPath). TestEveryProblemLinksToItsEntry holds it to
// the spec's list of codes.
//
//go:embed problems.html
var problemsPage []byte

// pageSecurityHeaders are the headers of a page that takes a secret: a
// Content-Security-Policy that lets it load only what it is made of (its
// own scripts, styles and images from this service, its inline script and
// style by their hashes), talk only to this service, and be framed by
// nobody; the same for browsers without CSP's frame-ancestors; no MIME
// sniffing; no Referer to elsewhere; no cached copy.
//
// The page's inline script and style are Swagger UI's and swgui's, fixed
// once the handler is built; they are hashed from the page itself, so an
// upgrade of swgui that changes them still gets a policy that fits.
func pageSecurityHeaders(page http.Handler) map[string]string {
	rec := httptest.NewRecorder()
	page.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, docsPath, nil))
	html := rec.Body.String()
	csp := strings.Join([]string{
		"default-src 'none'",
		"script-src 'self'" + inlineHashes(html, "script"),
		"style-src 'self'" + inlineHashes(html, "style"),
		// Swagger UI's stylesheet draws its icons as data: SVGs.
		"img-src 'self' data:",
		"connect-src 'self'",
		"font-src 'self'",
		"base-uri 'none'",
		"form-action 'none'",
		"frame-ancestors 'none'",
	}, "; ")
	return map[string]string{
		echo.HeaderContentSecurityPolicy: csp,
		echo.HeaderXFrameOptions:         "DENY",
		echo.HeaderXContentTypeOptions:   "nosniff",
		echo.HeaderReferrerPolicy:        "no-referrer",
		"Cross-Origin-Opener-Policy":     "same-origin",
		echo.HeaderCacheControl:          "no-store",
	}
}

var inlineElement = map[string]*regexp.Regexp{
	"script": regexp.MustCompile(`(?s)<script>(.*?)</script>`),
	"style":  regexp.MustCompile(`(?s)<style>(.*?)</style>`),
}

// inlineHashes lists, as CSP sources, the SHA-256 of each inline element
// of the tag in html (an element with attributes, such as a script with a
// src, is not inline).
func inlineHashes(html, tag string) string {
	var sources strings.Builder
	for _, m := range inlineElement[tag].FindAllStringSubmatch(html, -1) {
		sum := sha256.Sum256([]byte(m[1]))
		sources.WriteString(" 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'")
	}
	return sources.String()
}

// withHeaders sets headers on every response of next.
func withHeaders(next http.Handler, headers map[string]string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range headers {
			w.Header().Set(k, v)
		}
		next.ServeHTTP(w, r)
	})
}
