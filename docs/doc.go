// Package docs holds ringmaster's documentation (the Markdown files of this
// directory) and the test that keeps it in step with the code: every
// condition reason, event reason, metric and flag the code defines is
// documented, the documentation names none the code lacks, and its
// relative links resolve.
package docs
