package cluster_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/payments/payments/workflows"
)

// docker-compose.yml describes the cluster `make run-cluster` runs: the same server and UI
// versions as the Makefile builds, the same configuration files, and the search attributes the
// workflows set. (It cannot be run here; this keeps the two from drifting apart.)
func TestComposeDescribesTheSameCluster(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root(t), name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	compose, makefile := read("docker-compose.yml"), read("Makefile")
	version := func(v string) string {
		m := regexp.MustCompile(`(?m)^` + v + ` := v(\S+)$`).FindStringSubmatch(makefile)
		if m == nil {
			t.Fatalf("the Makefile sets no %s", v)
		}
		return m[1]
	}
	for _, image := range []string{"temporalio/server:" + version("TEMPORAL_SERVER_VERSION"),
		"temporalio/admin-tools:" + version("TEMPORAL_SERVER_VERSION"), "temporalio/ui:" + version("TEMPORAL_UI_VERSION")} {
		if !strings.Contains(compose, "image: "+image+"\n") {
			t.Errorf("docker-compose.yml does not run %s", image)
		}
	}
	for _, s := range []string{"--service history", "--service matching", "--service frontend", "--service worker"} {
		if !strings.Contains(compose, "--config etc/payments-temporal --env cluster --allow-no-auth start "+s) {
			t.Errorf("docker-compose.yml does not start %q with deploy/temporal/cluster.yaml", s)
		}
	}
	for _, f := range []string{"./deploy/temporal:/etc/payments-temporal:ro", "/etc/payments-temporal/dynamicconfig.yaml", "/etc/payments-temporal/setup-schema.sh"} {
		if !strings.Contains(compose, f) {
			t.Errorf("docker-compose.yml does not use %s", f)
		}
	}
	registered := map[string]string{}
	for _, m := range regexp.MustCompile(`--name (\w+) --type (\w+)`).FindAllStringSubmatch(compose, -1) {
		registered[m[1]] = m[2]
	}
	for name, kind := range workflows.SearchAttributeTypes {
		if want := strings.TrimPrefix(kind.String(), "IndexedValueType"); registered[name] != want {
			t.Errorf("docker-compose.yml registers search attribute %s as %q, the workflows set it as %s", name, registered[name], want)
		}
	}
	if len(registered) != len(workflows.SearchAttributeTypes) {
		t.Errorf("docker-compose.yml registers %v, the workflows set %v", registered, workflows.SearchAttributeTypes)
	}
}
