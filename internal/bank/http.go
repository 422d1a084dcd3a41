package bank

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/payments/payments/internal/strictjson"
)

// HTTP is the Rail of a bank speaking the protocol of docs/bank.md over HTTP (the simulator).
type HTTP struct {
	BaseURL string       // e.g. http://localhost:8090
	Client  *http.Client // nil: a client with a 10 s timeout
}

func (h *HTTP) client() *http.Client {
	if h.Client != nil {
		return h.Client
	}
	return &http.Client{Timeout: 10 * time.Second}
}

// Send posts the instruction with its key. A 2xx is the payment; 422 a refusal; 409 (another
// instruction under the key) answers what the bank holds: refusing would release money the bank
// is paying. Anything else, a timeout included, is an unknown outcome.
func (h *HTTP) Send(ctx context.Context, in Instruction) (Payment, error) {
	body, _ := json.Marshal(map[string]any{"amount_minor": in.AmountMinor, "currency": in.Currency,
		"destination": in.Destination, "reference": in.Reference})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.BaseURL+"/payments", bytes.NewReader(body))
	if err != nil {
		return Payment{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", in.Key)
	// Go's transport resends a request with an Idempotency-Key by itself when a reused connection
	// breaks before the answer: safe, but it hides an unknown outcome inside one attempt. The
	// activity's retry, visible in the Temporal UI, is the one that asks again.
	req.GetBody = nil
	var p Payment
	status, raw, err := h.do(req, &p)
	switch {
	case err != nil:
		return Payment{}, err
	case status == http.StatusOK || status == http.StatusCreated:
		return p, nil
	case status == http.StatusConflict:
		found, ok, err := h.Find(ctx, in.Key)
		if err == nil && !ok {
			err = fmt.Errorf("the bank answered 409 and holds nothing under key %s: %s", in.Key, raw)
		}
		return found, err
	case status == http.StatusUnprocessableEntity:
		return Payment{}, fmt.Errorf("%w: %d %s", ErrRefused, status, raw)
	default:
		return Payment{}, fmt.Errorf("the bank answered %d: %s", status, raw)
	}
}

// Find asks the bank for the payment of instruction key.
func (h *HTTP) Find(ctx context.Context, key string) (Payment, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.BaseURL+"/payments?idempotency_key="+url.QueryEscape(key), nil)
	if err != nil {
		return Payment{}, false, err
	}
	var p Payment
	status, raw, err := h.do(req, &p)
	switch {
	case err != nil:
		return Payment{}, false, err
	case status == http.StatusOK:
		return p, true, nil
	case status == http.StatusNotFound:
		return Payment{}, false, nil
	default:
		return Payment{}, false, fmt.Errorf("the bank answered %d: %s", status, raw)
	}
}

// Statement lists the bank's payments.
func (h *HTTP) Statement(ctx context.Context) ([]Payment, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.BaseURL+"/payments", nil)
	if err != nil {
		return nil, err
	}
	var page statementPage
	status, raw, err := h.do(req, &page)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("the bank answered %d: %s", status, raw)
	}
	if err != nil {
		return nil, err
	}
	if page.Data == nil {
		page.Data = []Payment{} // no payments, and a statement that says so
	}
	return page.Data, nil
}

// statementPage is the bank's answer to GET /payments.
type statementPage struct {
	Data []Payment `json:"data"`
}

// do sends req and decodes a 2xx answer into out strictly, its free text made storable so that a
// reason PostgreSQL cannot hold never makes a settlement fail for ever; it returns status and body.
func (h *HTTP) do(req *http.Request, out any) (int, []byte, error) {
	resp, err := h.client().Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("the bank did not answer: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("reading the bank's answer: %w", err)
	}
	if resp.StatusCode/100 == 2 {
		if err := strictjson.Decode(raw, out, strictjson.Options{IgnoreUnknown: true}); err != nil {
			return 0, raw, fmt.Errorf("the bank's answer is not a payment: %w", err)
		}
		switch v := out.(type) {
		case *Payment:
			v.storable()
		case *statementPage:
			for i := range v.Data {
				v.Data[i].storable()
			}
		}
	}
	return resp.StatusCode, raw, nil
}
