package strictjson

import (
	"encoding/json"
	"errors"
	"testing"
)

type kinded struct {
	Kind  string `json:"kind"`
	Inner struct {
		Size int `json:"size"`
	} `json:"inner"`
}

// Each refusal is of its kind, naming the member; with IgnoreUnknown, a member is skipped only
// when encoding/json would not fill a field from it: the Kelvin sign folds onto "k", and
// encoding/json reads "\u212aind" as "kind".
func TestRefusals(t *testing.T) {
	var probe kinded
	if err := json.Unmarshal([]byte(`{"\u212aind":"x"}`), &probe); err != nil || probe.Kind != "x" {
		t.Fatalf("encoding/json no longer folds the Kelvin sign (%v, %+v): revisit fold", err, probe)
	}
	for _, c := range []struct {
		body          string
		ignoreUnknown bool
		kind          Kind
		field, known  string
	}{
		{``, false, NotObject, "", ""},
		{`[]`, false, NotObject, "", ""},
		{"{\"kind\":\"\xff\"}", false, NotUTF8, "", ""},
		{`{"kind":"a"} {}`, false, Trailing, "", ""},
		{`{"kind":"a",}`, false, Syntax, "", ""},
		{`{"kind":"a","kind":"b"}`, true, Duplicate, "kind", ""},
		{`{"inner":{"size":1,"size":2}}`, true, Duplicate, "inner.size", ""},
		{`{"other":{"x":1,"x":2}}`, true, Duplicate, "other.x", ""},
		{`{"Kind":"a"}`, false, Unknown, "Kind", "kind"},
		{`{"other":1}`, false, Unknown, "other", ""},
		{`{"Kind":"a"}`, true, CaseVariant, "Kind", "kind"},
		{`{"\u212aind":"a"}`, true, CaseVariant, "\u212aind", "kind"},
		{`{"inner":{"SIZE":1}}`, true, CaseVariant, "inner.SIZE", "size"},
		{`{"kind":1}`, true, WrongType, "kind", ""},
	} {
		var dst kinded
		err := Decode([]byte(c.body), &dst, Options{IgnoreUnknown: c.ignoreUnknown})
		var e *Error
		if !errors.As(err, &e) || e.Kind != c.kind || e.Field != c.field || e.Known != c.known {
			t.Errorf("%s (ignore unknown %v): %#v, want kind %d field %q known %q", c.body, c.ignoreUnknown, err, c.kind, c.field, c.known)
		}
	}
	var dst kinded
	if err := Decode([]byte(`{"kind":"a","other":{"Kind":1},"inner":{"size":2}}`), &dst, Options{IgnoreUnknown: true}); err != nil ||
		dst.Kind != "a" || dst.Inner.Size != 2 {
		t.Fatalf("%+v %v", dst, err)
	}
}
