// Package keyring holds the processor's encryption keys (PAYMENTS_CODEC_KEYS) and seals and opens
// data with them (AES-256-GCM). The first key seals; every key opens, so a key is rotated by putting
// a new one first and keeping the old ones while anything sealed with them is (docs/security.md).
package keyring

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Ring is a set of keys, the first the one that seals.
type Ring struct {
	ids   []string
	aeads map[string]cipher.AEAD
}

// KeySize is the size of a key: AES-256.
const KeySize = 32

// keyID is what a key id may be: short, printable, and without the separators of the variable.
var keyID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// Parse reads keys written as PAYMENTS_CODEC_KEYS writes them: id=base64key,… (standard base64
// of 32 bytes, padded or not). Every error names the key at fault and never its value.
func Parse(s string) (*Ring, error) {
	r := &Ring{aeads: map[string]cipher.AEAD{}}
	for i, part := range strings.Split(s, ",") {
		id, b64, ok := strings.Cut(strings.TrimSpace(part), "=")
		switch {
		case !ok || !keyID.MatchString(id):
			return nil, fmt.Errorf("key %d: want id=base64key, the id of letters, digits, '.', '_' or '-'", i+1)
		case r.aeads[id] != nil:
			return nil, fmt.Errorf("key %q: given twice", id)
		}
		key, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			key, err = base64.RawStdEncoding.DecodeString(b64)
		}
		if err != nil || len(key) != KeySize {
			return nil, fmt.Errorf("key %q: want %d bytes in standard base64", id, KeySize)
		}
		block, _ := aes.NewCipher(key) // a 32-byte key is always valid
		aead, _ := cipher.NewGCM(block)
		r.ids, r.aeads[id] = append(r.ids, id), aead
	}
	return r, nil
}

// Generate returns a new key ring of one key, id, written as Parse reads it.
func Generate(id string) string {
	key := make([]byte, KeySize)
	_, _ = rand.Read(key) // crypto/rand does not fail
	return id + "=" + base64.StdEncoding.EncodeToString(key)
}

// KeyID is the id of the key that seals.
func (r *Ring) KeyID() string { return r.ids[0] }

// Seal encrypts plain with the first key, bound to aad (what the value is: it cannot be opened
// as something else), and returns the key's id and nonce‖ciphertext.
func (r *Ring) Seal(plain, aad []byte) (keyID string, sealed []byte) {
	aead := r.aeads[r.ids[0]]
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	_, _ = rand.Read(nonce)
	return r.ids[0], aead.Seal(nonce, nonce, plain, aad)
}

// ErrUnknownKey is a value sealed with a key the ring does not hold.
var ErrUnknownKey = errors.New("sealed with a key this ring does not hold")

// ErrOpen is a sealed value that does not open: altered, truncated, or sealed as something else.
var ErrOpen = errors.New("sealed value does not open: altered, or not what it claims to be")

// Open decrypts sealed, sealed by Seal with key keyID and aad.
func (r *Ring) Open(keyID string, sealed, aad []byte) ([]byte, error) {
	aead := r.aeads[keyID]
	if aead == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownKey, keyID)
	}
	if len(sealed) < aead.NonceSize() {
		return nil, ErrOpen
	}
	plain, err := aead.Open(nil, sealed[:aead.NonceSize()], sealed[aead.NonceSize():], aad)
	if err != nil {
		return nil, ErrOpen
	}
	return plain, nil
}
