package agent

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDocsListEveryReason: the reason table of docs/agent.md names every
// reason label of ringmaster_agent_reload_errors_total, and no other.
func TestDocsListEveryReason(t *testing.T) {
	page, err := os.ReadFile("../../docs/agent.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(page), "| reason | what was refused |")
	if !ok {
		t.Fatal("docs/agent.md has no reason table")
	}
	name := regexp.MustCompile("`([a-z_]+)`")
	var listed []string
	for line := range strings.Lines(strings.TrimPrefix(table, "\n")) {
		if !strings.HasPrefix(line, "|") {
			break
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "|"), "|")
		for _, m := range name.FindAllStringSubmatch(first, -1) {
			listed = append(listed, m[1])
		}
	}
	for _, r := range reasonNames {
		if !slices.Contains(listed, r) {
			t.Errorf("reason %s is missing from the table of docs/agent.md", r)
		}
	}
	for _, l := range listed {
		if !slices.Contains(reasonNames[:], l) {
			t.Errorf("docs/agent.md lists reason %s, which the agent does not count", l)
		}
	}
}
