package supervise

import (
	"context"
	"fmt"
	"os/exec"
)

// BuildPayments builds the payments command at bin. The package is named by its import path, so
// it builds from any directory of the module.
func BuildPayments(ctx context.Context, bin string) error {
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/payments/payments/cmd/payments")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %w\n%s", bin, err, out)
	}
	return nil
}
