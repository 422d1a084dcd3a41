package idempotency

import (
	"bytes"
	"encoding/json"
	"errors"
)

// Body is a stored answer's body, replayed byte for byte. In JSON (as the Temporal UI shows it)
// it is the body itself when that is compact JSON, so an operator reads the answer rather than
// base64; any other body is a base64 string, as []byte always was, so old histories decode.
type Body []byte

// MarshalJSON writes b as JSON when the JSON encoder would pass it through unchanged, so that
// decoding gives back exactly b; otherwise as a base64 string.
func (b Body) MarshalJSON() ([]byte, error) {
	if b == nil {
		return []byte("null"), nil
	}
	if isVerbatimJSON(b) {
		return b, nil
	}
	return json.Marshal([]byte(b))
}

// UnmarshalJSON reads a base64 string (how bodies were written before) or the body itself.
func (b *Body) UnmarshalJSON(data []byte) error {
	switch {
	case bytes.Equal(data, []byte("null")):
		*b = nil
		return nil
	case len(data) > 0 && data[0] == '"':
		var raw []byte
		if err := json.Unmarshal(data, &raw); err != nil {
			return errors.New("a stored body must be JSON or a base64 string")
		}
		*b = raw
		return nil
	default:
		*b = append(Body(nil), data...)
		return nil
	}
}

// isVerbatimJSON reports whether b is a JSON object or array that encoding/json, which compacts
// and HTML-escapes what a MarshalJSON method returns, would write unchanged.
func isVerbatimJSON(b []byte) bool {
	if len(b) == 0 || (b[0] != '{' && b[0] != '[') || !json.Valid(b) {
		return false
	}
	var compact bytes.Buffer
	if json.Compact(&compact, b) != nil {
		return false
	}
	var escaped bytes.Buffer
	json.HTMLEscape(&escaped, compact.Bytes())
	return bytes.Equal(escaped.Bytes(), b)
}
