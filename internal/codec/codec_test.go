package codec

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/payments/payments/internal/keyring"
)

func ring(t *testing.T, keys string) *keyring.Ring {
	t.Helper()
	r, err := keyring.Parse(keys)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

type destination struct{ AccountNumber, Name string }

var secret = destination{AccountNumber: "000123450003", Name: "Jane Roe"}

// What the converter writes holds none of the value, not even its encoding, and reads back as
// the value; a payload written before encryption reads as it always did; after a rotation the
// old payloads still read, and without their key they do not.
func TestPayloadsAreSealedAndReadBack(t *testing.T) {
	k1, k2 := keyring.Generate("k1"), keyring.Generate("k2")
	dc := DataConverter(ring(t, k1))
	p, err := dc.ToPayload(secret)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := protojson.Marshal(p)
	for _, leak := range []string{"000123450003", "Jane", "json/plain"} {
		if bytes.Contains(raw, []byte(leak)) || bytes.Contains(p.GetData(), []byte(leak)) {
			t.Errorf("the sealed payload shows %q: %s", leak, raw)
		}
	}
	if string(p.Metadata[MetadataKeyID]) != "k1" || string(p.Metadata[MetadataEncoding]) != EncodingEncrypted {
		t.Errorf("metadata %v", p.Metadata)
	}
	var back destination
	if err := dc.FromPayload(p, &back); err != nil || back != secret {
		t.Fatalf("read back %+v, %v", back, err)
	}

	plain, _ := converter.GetDefaultDataConverter().ToPayload(secret)
	back = destination{}
	if err := dc.FromPayload(plain, &back); err != nil || back != secret {
		t.Errorf("a payload from before encryption read as %+v, %v", back, err)
	}

	rotated := DataConverter(ring(t, k2+","+k1))
	back = destination{}
	if err := rotated.FromPayload(p, &back); err != nil || back != secret {
		t.Errorf("after rotation: %+v, %v", back, err)
	}
	if err := DataConverter(ring(t, k2)).FromPayload(p, &back); err == nil {
		t.Error("read without the key that sealed it")
	}
}

// A failure's message is encoded too: it may quote what it failed on.
func TestFailureMessagesAreEncoded(t *testing.T) {
	dc := DataConverter(ring(t, keyring.Generate("k1")))
	fc := FailureConverter(dc)
	f := fc.ErrorToFailure(io.ErrUnexpectedEOF)
	if strings.Contains(f.GetMessage(), "unexpected EOF") || f.GetEncodedAttributes() == nil {
		t.Fatalf("failure message in the clear: %q", f.GetMessage())
	}
	if err := fc.FailureToError(f); !strings.Contains(err.Error(), "unexpected EOF") {
		t.Errorf("decoded failure %v", err)
	}
}

func payloadsJSON(t *testing.T, ps ...*commonpb.Payload) string {
	b, err := protojson.Marshal(&commonpb.Payloads{Payloads: ps})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The codec server decodes for the UI's origin and the CLI, refuses any other origin, and asks
// for its token when it has one.
func TestCodecServer(t *testing.T) {
	r := ring(t, keyring.Generate("k1"))
	sealed, _ := DataConverter(r).ToPayload(secret)
	const ui = "http://127.0.0.1:8233"
	srv := httptest.NewServer(Handler(r, []string{ui, "http://localhost:8233"}, "tok"))
	defer srv.Close()
	do := func(method, path, origin, token, body string) *http.Response {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	body := payloadsJSON(t, sealed)

	resp := do("POST", "/decode", ui, "tok", body)
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != ui {
		t.Fatalf("decode for the UI: %d, ACAO %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
	}
	var out commonpb.Payloads
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &out); err != nil || len(out.Payloads) != 1 || !bytes.Contains(out.Payloads[0].Data, []byte("000123450003")) {
		t.Fatalf("decoded %s (%v)", b, err)
	}

	for _, c := range []struct {
		name, method, origin, token string
		want                        int
	}{
		{"the CLI, with the token", "POST", "", "tok", 200},
		{"without the token", "POST", ui, "", 401},
		{"a wrong token", "POST", "", "tok2", 401},
		{"another origin", "POST", "http://evil.example", "tok", 403},
		{"another origin's preflight", "OPTIONS", "http://evil.example", "", 403},
		{"the UI's preflight", "OPTIONS", ui, "", 204},
	} {
		if got := do(c.method, "/decode", c.origin, c.token, body).StatusCode; got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}

	// encode then decode through the server is the identity
	plain, _ := converter.GetDefaultDataConverter().ToPayload(secret)
	resp = do("POST", "/encode", "", "tok", payloadsJSON(t, plain))
	b, _ = io.ReadAll(resp.Body)
	if bytes.Contains(b, []byte("000123450003")) {
		t.Fatalf("encode answered in the clear: %s", b)
	}
}
