package testenv

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	payments "github.com/payments/payments"
)

// Contract checks every response a test package receives through http.DefaultClient against
// openapi.yaml: a handler that answers outside the published contract fails the run. Run
// installs one for the package; requests to the bank simulator go through a client of their own.
type Contract struct {
	next      http.RoundTripper
	validator validator.Validator
	mu        sync.Mutex
	failures  []string
	checked   int
}

// NewContract reads openapi.yaml.
func NewContract() (*Contract, error) {
	doc, err := libopenapi.NewDocument(payments.OpenAPI)
	if err != nil {
		return nil, err
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		return nil, fmt.Errorf("openapi.yaml: %v", errs)
	}
	return &Contract{next: http.DefaultTransport, validator: v}, nil
}

// RoundTrip sends req and checks the response it gets.
func (c *Contract) RoundTrip(req *http.Request) (*http.Response, error) {
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

// Valid reports whether resp, an answer to req, keeps the contract.
func (c *Contract) Valid(req *http.Request, resp *http.Response) bool {
	ok, _ := c.validator.ValidateHttpResponse(req, resp)
	return ok
}

// Report returns the responses that broke the contract, as one error, or nil.
func (c *Contract) Report() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.failures) > 0 {
		return fmt.Errorf("%d responses break openapi.yaml:\n%s", len(c.failures), strings.Join(c.failures, "\n"))
	}
	return nil
}

// Checked is how many responses were checked.
func (c *Contract) Checked() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checked
}
