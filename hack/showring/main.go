// Command showring prints the ticketkeys.json read from stdin as a table of
// key ids, states and times, never key bytes. make demo uses it to show what
// the pods of a fleet receive.
package main

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
)

func main() {
	data, err := io.ReadAll(os.Stdin)
	if err == nil {
		err = show(data, time.Now())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "showring:", err)
		os.Exit(1)
	}
}

func show(data []byte, now time.Time) error {
	r, err := keyring.Decode(data)
	if err != nil {
		return err
	}
	fmt.Printf("ring %s, epoch %d, issued %s\n", r.Name, r.Epoch, r.IssuedAt.Format(time.RFC3339))
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "  KEY\tSTATE\tACTIVE FROM\tRETIRE AT\tEXPIRES AT")
	for _, k := range r.Keys {
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", k.ID, r.StateOf(k, now), clock(k.ActiveFrom), clock(k.RetireAt), clock(k.ExpiresAt))
	}
	return w.Flush()
}

func clock(t time.Time) string { return t.Local().Format("15:04:05") }
