package api_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	payments "github.com/payments/payments"
	"github.com/payments/payments/internal/problem"
)

// contract checks every response the tests of this package receive against openapi.yaml: a
// handler that answers outside the published contract fails the run.
type contract struct {
	next      http.RoundTripper
	validator validator.Validator
	mu        sync.Mutex
	failures  []string
	checked   int
}

func newContract() (*contract, error) {
	doc, err := libopenapi.NewDocument(payments.OpenAPI)
	if err != nil {
		return nil, err
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		return nil, fmt.Errorf("openapi.yaml: %v", errs)
	}
	return &contract{next: http.DefaultTransport, validator: v}, nil
}

func (c *contract) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	check := *resp
	check.Body = io.NopCloser(bytes.NewReader(body))
	// The request body was consumed on the way out; the validator reads only the response here.
	plain := req.Clone(req.Context())
	plain.Body = http.NoBody
	ok, errs := c.validator.ValidateHttpResponse(plain, &check)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checked++
	if !ok {
		for _, e := range errs {
			c.failures = append(c.failures, fmt.Sprintf("%s %s -> %d: %s %s (%s)", req.Method, req.URL.Path, resp.StatusCode, e.Message, e.Reason, body))
		}
	}
	return resp, nil
}

func (c *contract) report() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.failures) > 0 {
		return fmt.Errorf("%d responses break openapi.yaml:\n%s", len(c.failures), strings.Join(c.failures, "\n"))
	}
	return nil
}

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
	if ok, _ := checker.validator.ValidateHttpResponse(req, resp); ok {
		t.Fatal("an incomplete transfer passed the contract check")
	}
}
