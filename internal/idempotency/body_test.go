package idempotency

import (
	"bytes"
	"encoding/json"
	"testing"
)

// A stored body goes through a workflow result as JSON and comes back byte for byte, whatever it
// holds; compact JSON shows as itself, anything else as base64, and the base64 of histories
// written before still decodes.
func TestBodyRoundTripsByteForByte(t *testing.T) {
	for _, body := range []string{
		`{"id":"tr_1","amount_minor":1250}`,
		`{"description":"\u003cb\u003e \u0026"}`, // as json.Marshal escapes HTML
		`{"description":"<b> &"}`,                // the same, unescaped: would be changed, so base64
		`{ "spaced": true }`,                     // would be compacted, so base64
		`not json`,
		``,
		`[1,2]`,
	} {
		out, err := json.Marshal(Response{Status: 201, Body: Body(body)})
		if err != nil {
			t.Fatal(err)
		}
		var back Response
		if err := json.Unmarshal(out, &back); err != nil || !bytes.Equal(back.Body, []byte(body)) {
			t.Fatalf("%q went out as %s and came back as %q (%v)", body, out, back.Body, err)
		}
	}
	readable, _ := json.Marshal(Response{Body: Body(`{"id":"tr_1"}`)})
	if !bytes.Contains(readable, []byte(`"body":{"id":"tr_1"}`)) {
		t.Fatalf("a JSON body is not shown as JSON: %s", readable)
	}
	var old Response
	if err := json.Unmarshal([]byte(`{"status":201,"body":"eyJpZCI6InRyXzEifQ=="}`), &old); err != nil || string(old.Body) != `{"id":"tr_1"}` {
		t.Fatalf("a base64 body of an old history: %q %v", old.Body, err)
	}
}

func FuzzBodyRoundTrip(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":"<"}`, `[]`, `"s"`, "\xff", `{"a":"\u2028"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		out, err := json.Marshal(Body(body))
		if err != nil {
			t.Fatal(err)
		}
		var back Body
		if err := json.Unmarshal(out, &back); err != nil || !bytes.Equal(back, body) {
			t.Fatalf("%q -> %s -> %q (%v)", body, out, back, err)
		}
	})
}
