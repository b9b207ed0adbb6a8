package proxy

import "net/http"

func (g *Gateway) handleReload(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotImplemented, "not_implemented", "reload")
}
