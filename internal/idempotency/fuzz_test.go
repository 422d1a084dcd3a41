package idempotency

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b"`, "", " ", "a b", `"`, `""`, "\x00", "é", `"\\"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := ParseKey([]string{v})
		if err != nil {
			return
		}
		if key == "" || len(key) > MaxKeyLength {
			t.Fatalf("accepted key %q of length %d", key, len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x21 || key[i] > 0x7E {
				t.Fatalf("accepted byte %#x in %q", key[i], key)
			}
		}
		// The key, sent as an RFC 8941 string, parses to itself; so does it bare, unless it
		// starts with a quote (then it reads as a quoted string).
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		if again, err := ParseKey([]string{quoted}); err != nil || again != key {
			t.Fatalf("key %q sent as %s parses as %q, %v", key, quoted, again, err)
		}
		if again, err := ParseKey([]string{key}); key[0] != '"' && (err != nil || again != key) {
			t.Fatalf("key %q re-parses as %q, %v", key, again, err)
		}
	})
}

func FuzzCanonical(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[1,2,{"c":null}]}`, `{ "b" : "x" , "a" : true }`, `[]`, `"s"`, `1e3`, `{"a":"<&>"}`, `{`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		canon, err := Canonical(body)
		if err != nil {
			return
		}
		// Canonical form is a fixed point and valid JSON equal in value to the input.
		again, err := Canonical(canon)
		if err != nil || !bytes.Equal(again, canon) {
			t.Fatalf("not a fixed point: %s -> %s (%v)", canon, again, err)
		}
		if !json.Valid(canon) {
			t.Fatalf("canonical form is not JSON: %s", canon)
		}
		// Re-indenting the input does not change its canonical form.
		var spaced bytes.Buffer
		if json.Indent(&spaced, body, " ", "  ") == nil {
			if c2, err := Canonical(spaced.Bytes()); err != nil || !bytes.Equal(canon, c2) {
				t.Fatalf("whitespace changed the canonical form of %s: %s", body, c2)
			}
		}
	})
}
