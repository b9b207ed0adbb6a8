package store

import (
	"encoding/json"
	"github.com/breakwater-gw/breakwater/model/settings"
)

// Saved settings live in key_value under this namespace and key.
const (
	settingsNamespace = "settings"
	settingsKey       = "resilience"
)

// layerJSON encodes a settings layer, canonicalising it first so that what
// is stored is exactly what ParseLayerJSON reads back.
func layerJSON(l settings.Layer) ([]byte, error) {
	if l == nil {
		l = settings.Layer{}
	}
	c, err := settings.LayerOf(map[string]any(l))
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any(c))
}
