package keyring

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestSealOpenAndRotate(t *testing.T) {
	k1, k2 := Generate("k1"), Generate("k2")
	old, err := Parse(k1)
	if err != nil {
		t.Fatal(err)
	}
	id, sealed := old.Seal([]byte("000123450003"), []byte("payload"))
	if id != "k1" || bytes.Contains(sealed, []byte("000123450003")) {
		t.Fatalf("sealed by %q: %q", id, sealed)
	}
	// Rotated: a new key first, the old one kept. New values are sealed with the new key, old
	// ones still open.
	rotated, err := Parse(k2 + "," + k1)
	if err != nil {
		t.Fatal(err)
	}
	if plain, err := rotated.Open(id, sealed, []byte("payload")); err != nil || string(plain) != "000123450003" {
		t.Fatalf("old value after rotation: %q, %v", plain, err)
	}
	if id2, _ := rotated.Seal([]byte("x"), nil); id2 != "k2" || rotated.KeyID() != "k2" {
		t.Fatalf("sealed by %q after rotation, want k2", id2)
	}
	// What does not open: another aad, a flipped bit, a truncation, a key dropped from the ring.
	if _, err := rotated.Open(id, sealed, []byte("secret")); !errors.Is(err, ErrOpen) {
		t.Errorf("opened under another aad: %v", err)
	}
	flipped := bytes.Clone(sealed)
	flipped[len(flipped)-1] ^= 1
	if _, err := rotated.Open(id, flipped, []byte("payload")); !errors.Is(err, ErrOpen) {
		t.Errorf("opened altered: %v", err)
	}
	if _, err := rotated.Open(id, sealed[:5], []byte("payload")); !errors.Is(err, ErrOpen) {
		t.Errorf("opened truncated: %v", err)
	}
	newOnly, _ := Parse(k2)
	if _, err := newOnly.Open(id, sealed, []byte("payload")); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("opened with the key gone: %v", err)
	}
}

func TestParseRefusesWithoutShowingTheKey(t *testing.T) {
	key := strings.TrimPrefix(Generate("k"), "k=")
	for _, s := range []string{"", "k", "k=", "=" + key, "k=" + key[:20], "k=" + key + ",k=" + key, "k k=" + key, "k=" + key + "!"} {
		_, err := Parse(s)
		if err == nil {
			t.Errorf("Parse(%q) accepted", s)
			continue
		}
		if len(key) > 8 && strings.Contains(err.Error(), key[:8]) {
			t.Errorf("Parse(%q) error shows the key: %v", s, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(Generate("k1") + "," + Generate("k2"))
	f.Add("k=AAAA")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err != nil {
			return
		}
		id, sealed := r.Seal([]byte("x"), nil)
		if plain, err := r.Open(id, sealed, nil); err != nil || string(plain) != "x" {
			t.Fatalf("a parsed ring does not open what it sealed: %v", err)
		}
	})
}
