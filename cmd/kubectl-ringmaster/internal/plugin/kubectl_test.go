//go:build integration

package plugin_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/ringmaster-io/ringmaster/internal/testing/testenv"
)

var _ = Describe("kubectl", func() {
	It("runs the built plugin from the PATH as kubectl ringmaster", func(ctx SpecContext) {
		dir := GinkgoT().TempDir()
		build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, "kubectl-ringmaster"), "./cmd/kubectl-ringmaster")
		build.Dir = testenv.Root()
		out, err := build.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))

		kubectl := func(args ...string) (string, error) {
			cmd := exec.CommandContext(ctx, filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl"), args...)
			cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		list, err := kubectl("plugin", "list")
		Expect(err).NotTo(HaveOccurred(), list)
		Expect(list).To(ContainSubstring(filepath.Join(dir, "kubectl-ringmaster")))

		help, err := kubectl("ringmaster", "--help")
		Expect(err).NotTo(HaveOccurred(), help)
		Expect(help).To(ContainSubstring("kubectl ringmaster [command]"))
		for _, c := range []string{"audit", "status", "rotate", "revoke", "probe"} {
			Expect(help).To(MatchRegexp(`(?m)^  ` + c + `\s`))
		}

		status, err := kubectl("ringmaster", "status", "web", "-n", "shop", "--kubeconfig", admin)
		Expect(err).NotTo(HaveOccurred(), status)
		Expect(status).To(HavePrefix("TicketKeyRing shop/web\n"))
	}, SpecTimeout(5*time.Minute))
})
