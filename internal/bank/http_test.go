package bank

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// The bank's answers are read as strictly as its callbacks, and its free text made storable: a
// statement whose reason holds a NUL must not make every return pass fail in PostgreSQL, and an
// ambiguous payment must not be read one way of two.
func TestTheBanksAnswersAreReadStrictlyAndStorably(t *testing.T) {
	answer := ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(answer))
	}))
	defer srv.Close()
	h := &HTTP{BaseURL: srv.URL}

	answer = `{"data":[{"id":"pay_1","status":"returned","reference":"po_1","reason":"closed\u0000"}]}`
	got, err := h.Statement(context.Background())
	if err != nil || len(got) != 1 || got[0].Reason == nil || *got[0].Reason != `closed\u0000` {
		t.Fatalf("statement: %+v, %v; want one payment whose reason is stored escaped", got, err)
	}
	for _, ambiguous := range []string{
		`{"id":"pay_1","status":"paid","status":"failed"}`,
		`{"id":"pay_1","status":"paid","STATUS":"failed"}`,
	} {
		answer = ambiguous
		if p, _, err := h.Find(context.Background(), "po_1"); err == nil {
			t.Fatalf("%s read as %+v; want refused", ambiguous, p)
		}
	}
}
