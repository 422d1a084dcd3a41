package api_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	payments "github.com/payments/payments"
	"github.com/payments/payments/internal/problem"
	"github.com/payments/payments/rig/testenv"
)

func TestOpenAPIListsEveryProblemAndIsServed(t *testing.T) {
	r := env.Do(t, "GET", "/openapi.yaml", "", "", "")
	if r.Status != http.StatusOK || !bytes.Equal(r.Body, payments.OpenAPI) {
		t.Fatalf("GET /openapi.yaml: %d", r.Status)
	}
	for _, slug := range problem.Slugs() {
		if !bytes.Contains(payments.OpenAPI, []byte(slug)) {
			t.Errorf("openapi.yaml does not mention problem %q", slug)
		}
	}
}

func TestContractCatchesADeviation(t *testing.T) {
	// The checker itself must be able to fail: a Transfer without its required fields is caught.
	req, _ := http.NewRequest("GET", env.Server.URL+"/v1/transfers/tr_x", nil)
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{"id":"tr_x"}`)), Request: req}
	if testenv.ContractOf(t).Valid(req, resp) {
		t.Fatal("an incomplete transfer passed the contract check")
	}
}
