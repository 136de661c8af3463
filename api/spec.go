package api

import (
	_ "embed"
	"net/http"
)

// Spec is the OpenAPI 3 description of the v1 API, served at
// GET /v1/openapi.yaml. The package's tests drive every route against it,
// so the code and the description cannot drift apart.
//
//go:embed openapi.yaml
var Spec []byte

func serveSpec(w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Content-Type", "application/yaml")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(Spec)
	return nil
}
