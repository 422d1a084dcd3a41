package codec

import (
	"crypto/subtle"
	"net/http"
	"slices"
	"strings"

	"go.temporal.io/sdk/converter"

	"github.com/payments/payments/internal/keyring"
)

// Handler serves Temporal's remote codec protocol for ring: a browser only from origins (the Web
// UI's), and, when token is set, only requests carrying it as a bearer token.
func Handler(ring *keyring.Ring, origins []string, token string) http.Handler {
	codec := converter.NewPayloadCodecHTTPHandler(Codec{Ring: ring})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Vary", "Origin")
		switch from := r.Header.Get("Origin"); {
		case from == "": // not a browser's: the CLI, the SDK's remote codec
		case !slices.Contains(origins, from):
			http.Error(w, "origin not allowed", http.StatusForbidden)
			return
		default:
			w.Header().Set("Access-Control-Allow-Origin", from)
			w.Header().Set("Access-Control-Allow-Credentials", "true")
			w.Header().Set("Access-Control-Allow-Methods", "POST, OPTIONS")
			w.Header().Set("Access-Control-Allow-Headers", "Content-Type, X-Namespace, Authorization")
			w.Header().Set("Access-Control-Max-Age", "600")
		}
		if r.Method == http.MethodOptions { // a preflight carries no credentials
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if token != "" && !bearer(r, token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="payments codec"`)
			http.Error(w, "a bearer token is required", http.StatusUnauthorized)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		codec.ServeHTTP(w, r)
	})
}

// maxBody bounds a request: Temporal refuses payloads past 2 MB, and the UI sends a few at once.
const maxBody = 16 << 20

func bearer(r *http.Request, token string) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}
