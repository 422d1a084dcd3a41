package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/payments/payments/internal/money"
	"github.com/payments/payments/internal/problem"
)

// decode reads body into dst strictly: one JSON object, no unknown fields, right types.
func decode(body []byte, dst any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return problem.Invalid("the request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(dst)
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			return problem.Invalid("the request body must hold exactly one JSON object")
		}
		return nil
	}
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return problem.Invalid("the request body must be a JSON object")
		}
		return problem.Invalid("a field has the wrong type", problem.FieldError{Field: field, Message: "must be a JSON " + jsonType(typeErr.Type.Kind().String())})
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return problem.Invalid("the request has a field this API does not know", problem.FieldError{Field: field, Message: "unknown field"})
	case errors.As(err, &syntaxErr), errors.Is(err, io.ErrUnexpectedEOF):
		return problem.Invalid("the request body is not valid JSON: " + err.Error())
	default:
		return problem.Invalid("the request body is not valid JSON: " + err.Error())
	}
}

func jsonType(kind string) string {
	switch kind {
	case "string":
		return "string"
	case "int64", "int", "float64":
		return "number"
	default:
		return "value of the documented type"
	}
}

// fields collects field errors.
type fields []problem.FieldError

func (f *fields) add(field, format string, args ...any) {
	*f = append(*f, problem.FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

func (f fields) err() error {
	if len(f) == 0 {
		return nil
	}
	return problem.Invalid("the request has invalid fields", f...)
}

// amount parses an amount_minor: a JSON integer, never a float or a string.
func (f *fields) amount(raw json.RawMessage) int64 {
	s := string(raw)
	if s == "" || s == "null" {
		f.add("amount_minor", "is required")
		return 0
	}
	if strings.ContainsAny(s, ".eE\"") {
		f.add("amount_minor", "must be a JSON integer count of minor units")
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		f.add("amount_minor", "must be an integer between 1 and %d", money.MaxAmountMinor)
		return 0
	}
	if err := money.CheckAmount(n); err != nil {
		f.add("amount_minor", "%v", err)
	}
	return n
}

func (f *fields) currency(code string) {
	switch {
	case code == "":
		f.add("currency", "is required")
	case !money.ValidCurrency(code):
		f.add("currency", "must be one of %s", strings.Join(money.Currencies, ", "))
	}
}

func (f *fields) text(field, value string, max int) {
	if !utf8.ValidString(value) || utf8.RuneCountInString(value) > max {
		f.add(field, "must be at most %d characters of valid UTF-8", max)
	}
}
