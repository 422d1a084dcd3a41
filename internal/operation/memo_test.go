package operation

import (
	"context"
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/mocks"

	"github.com/stretchr/testify/mock"

	"github.com/payments/payments/internal/codec"
	"github.com/payments/payments/internal/keyring"
)

// A run whose memo is sealed with keys this process does not hold is an error, never a run of
// another operation (which would let the operation start a second time); with the keys, it is
// the operation's own run.
func TestAMemoSealedWithOtherKeysIsAnError(t *testing.T) {
	workers, _ := keyring.Parse(keyring.Generate("workers"))
	other, _ := keyring.Parse(keyring.Generate("other"))
	memo, err := codec.DataConverter(workers).ToPayload("tr_1")
	if err != nil {
		t.Fatal(err)
	}
	c := &mocks.Client{}
	c.On("DescribeWorkflowExecution", mock.Anything, "transfer/o/k", "").Return(&workflowservice.DescribeWorkflowExecutionResponse{
		WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
			Execution: &commonpb.WorkflowExecution{WorkflowId: "transfer/o/k", RunId: "r1"},
			Status:    enums.WORKFLOW_EXECUTION_STATUS_COMPLETED,
			Memo:      &commonpb.Memo{Fields: map[string]*commonpb.Payload{"transfer_id": memo}},
		}}, nil)
	op := func(keys *keyring.Ring) Operation {
		return Operation{Client: c, Converter: codec.DataConverter(keys), Options: client.StartWorkflowOptions{ID: "transfer/o/k"},
			MemoKey: "transfer_id", ID: "tr_1"}
	}
	if got, err := op(other).Classify(context.Background()); err == nil || !strings.Contains(err.Error(), "PAYMENTS_CODEC_KEYS") {
		t.Fatalf("classified with other keys: %+v, %v; want an error naming PAYMENTS_CODEC_KEYS", got, err)
	}
	if got, err := op(workers).Classify(context.Background()); err != nil || got.Standing != Closed {
		t.Fatalf("classified with the workers' keys: %+v, %v; want its own closed run", got, err)
	}
}
