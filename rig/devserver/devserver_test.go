package devserver

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/payments/payments/workflows"
)

func binary(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join("..", "..", "bin", "temporal"))
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// The server Start returns answers with the transfer search attributes registered, and Stop
// shuts it down cleanly.
func TestStartAndStop(t *testing.T) {
	s, err := Start(context.Background(), Options{Binary: binary(t), DBFile: filepath.Join(t.TempDir(), "temporal.db"), Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.Client().OperatorService().ListSearchAttributes(context.Background(),
		&operatorservice.ListSearchAttributesRequest{Namespace: "default"})
	if err != nil {
		_ = s.Stop()
		t.Fatal(err)
	}
	for name, typ := range workflows.SearchAttributeTypes {
		if got := resp.GetCustomAttributes()[name]; got != typ {
			t.Errorf("search attribute %s: %v, want %v", name, got, typ)
		}
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if c, err := net.DialTimeout("tcp", s.FrontendHostPort(), time.Second); err == nil {
		_ = c.Close()
		t.Fatal("the server still answers after Stop")
	}
}

// Start on an address already taken fails at once, rather than answer with the server already
// there.
func TestStartOnATakenAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s, err := Start(context.Background(), Options{Binary: binary(t), HostPort: l.Addr().String()})
	if err == nil {
		_ = s.Stop()
		t.Fatal("Start succeeded on a taken address")
	}
	if !strings.Contains(err.Error(), l.Addr().String()) {
		t.Errorf("the error does not name the address: %v", err)
	}
}

// A run admits fifty Updates at once (MaxInFlightUpdates), as fifty duplicates of a request to
// `payments api` ask it: none is refused for the run's in-flight limit.
func TestARunAdmitsFiftyUpdatesAtOnce(t *testing.T) {
	s, err := Start(context.Background(), Options{Binary: binary(t), Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	var refused atomic.Int32
	c, err := client.Dial(client.Options{HostPort: s.FrontendHostPort(), Logger: quiet{},
		ConnectionOptions: client.ConnectionOptions{DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				err := invoker(ctx, method, req, reply, cc, opts...)
				if status.Code(err) == codes.ResourceExhausted {
					refused.Add(1)
				}
				return err
			})}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	w := worker.New(c, "in-flight", worker.Options{})
	w.RegisterWorkflowWithOptions(holdsUpdates, workflow.RegisterOptions{Name: "holds-updates"})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: "in-flight"}, "holds-updates")
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { // one refused is retried by the SDK until its deadline
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, errs[i] = c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: run.GetID(),
				UpdateName: "wait", WaitForStage: client.WorkflowUpdateStageAccepted})
		})
	}
	wg.Wait()
	if n := refused.Load(); n > 0 {
		t.Errorf("%d calls refused as resource exhausted", n)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
	}
	if err := c.SignalWorkflow(ctx, run.GetID(), "", "go", nil); err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

// holdsUpdates accepts every "wait" Update and completes none until the "go" signal.
func holdsUpdates(ctx workflow.Context) error {
	released := false
	if err := workflow.SetUpdateHandler(ctx, "wait", func(ctx workflow.Context) error {
		return workflow.Await(ctx, func() bool { return released })
	}); err != nil {
		return err
	}
	workflow.GetSignalChannel(ctx, "go").Receive(ctx, nil)
	released = true
	return workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
}
