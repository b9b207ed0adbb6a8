// Package ui is the operator dashboard: plain HTML, CSS and JavaScript
// files embedded in the binary (no build step, no CDN, works offline) and
// the handler that serves them. The files hold no state and no secret; the
// page asks the management API for everything it shows, with the
// management key the operator types in (docs/dashboard.md).
package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var files embed.FS

// contentSecurityPolicy keeps the page to its own files: no inline script,
// no third-party origin, not framed by another site. blob: is for a
// scenario plot the operator opens from disk (shown in a sandboxed frame or
// an image, never run in the page); inline styles are allowed because the
// plots carry their own.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' blob: data:; connect-src 'self'; frame-src blob:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// Handler serves the dashboard's files; mount it with the /ui prefix
// stripped (http.StripPrefix).
func Handler() http.Handler {
	sub, err := fs.Sub(files, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	fsrv := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		// Small files, revalidated each load, so an upgrade is seen at once.
		h.Set("Cache-Control", "no-cache")
		fsrv.ServeHTTP(w, r)
	})
}
