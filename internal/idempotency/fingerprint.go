package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
)

// Canonical returns body as canonical JSON: keys sorted, no insignificant whitespace, numbers as
// written, strings without HTML escaping; only a change of value changes it.
func Canonical(body []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the JSON value")
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // maps encode with sorted keys
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// Fingerprint is the SHA-256 of the route and the canonical request: what decides whether a
// request with a known key is the same request. request is the decoded request the handler
// executes, never the raw body: a body can be read more than one way (duplicate or case-changed
// member names), its decoded value only one.
func Fingerprint(route string, request any) ([]byte, error) {
	switch request.(type) {
	case []byte, json.RawMessage, string:
		return nil, errors.New("fingerprint the decoded request, not its raw body")
	}
	var encoded bytes.Buffer
	enc := json.NewEncoder(&encoded)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(request); err != nil {
		return nil, err
	}
	canon, err := Canonical(encoded.Bytes())
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	h.Write([]byte(route))
	h.Write([]byte{0})
	h.Write(canon)
	return h.Sum(nil), nil
}
