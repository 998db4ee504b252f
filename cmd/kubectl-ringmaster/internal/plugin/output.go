package plugin

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
)

// ReportAPIVersion is the apiVersion of what -o json and -o yaml print:
// kinds of the plugin's own (AuditReport, RingStatus, ProbeReport), made on
// the client and never served by a cluster.
const ReportAPIVersion = "kubectl.ringmaster.io/v1alpha1"

// output is the -o flag: table (the default), wide where a table has more
// columns, json or yaml.
type output struct {
	format string
	wide   bool
}

func addOutputFlag(cmd *cobra.Command, o *output, wide bool) {
	formats := "table, json or yaml"
	if wide {
		formats = "table, wide, json or yaml"
	}
	cmd.Flags().StringVarP(&o.format, "output", "o", "table", "Output format: "+formats+".")
	o.wide = wide
}

func (o output) validate() error {
	switch o.format {
	case "table", "json", "yaml":
		return nil
	case "wide":
		if o.wide {
			return nil
		}
	}
	formats := []string{"table", "json", "yaml"}
	if o.wide {
		formats = slices.Insert(formats, 1, "wide")
	}
	return fmt.Errorf("unknown output format %q: want one of %v", o.format, formats)
}

func (o output) structured() bool { return o.format == "json" || o.format == "yaml" }

// printReport prints a report as kind, with cli-runtime's JSON or YAML
// printer.
func printReport(w io.Writer, format, kind string, report any) error {
	data, err := json.Marshal(report)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(data, &u.Object); err != nil {
		return err
	}
	u.SetAPIVersion(ReportAPIVersion)
	u.SetKind(kind)
	p, err := genericclioptions.NewJSONYamlPrintFlags().ToPrinter(format)
	if err != nil {
		return err
	}
	return p.PrintObj(u, w)
}

// column is a column of a table; wide ones show with -o wide.
type column struct {
	name string
	wide bool
}

// printTable prints rows under columns with cli-runtime's table printer, as
// kubectl get prints.
func printTable(w io.Writer, wide bool, columns []column, rows [][]any) error {
	t := &metav1.Table{}
	for _, c := range columns {
		def := metav1.TableColumnDefinition{Name: c.name, Type: "string"}
		if c.wide {
			def.Priority = 1
		}
		t.ColumnDefinitions = append(t.ColumnDefinitions, def)
	}
	for _, r := range rows {
		cells := make([]any, len(r))
		for i, c := range r {
			if s, ok := c.(string); ok {
				c = esc(s) // the table printer escapes ESC alone, and cuts a cell at a newline
			}
			cells[i] = c
		}
		t.Rows = append(t.Rows, metav1.TableRow{Cells: cells})
	}
	return printers.NewTablePrinter(printers.PrintOptions{Wide: wide}).PrintObj(t, w)
}

// now is the time commands report at: whole seconds, as the API's times
// are.
func now() time.Time { return time.Now().Truncate(time.Second) }

// age is how long ago t was, as kubectl prints ages; "-" for no time.
func age(t *metav1.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// relative says when t is from now: "in 3h" or "5m ago".
func relative(t time.Time, now time.Time) string {
	if t.After(now) {
		return "in " + duration.HumanDuration(t.Sub(now))
	}
	return duration.HumanDuration(now.Sub(t)) + " ago"
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// limit prints a configured duration the way it is written: 1h, 90m, 90d.
func limit(d time.Duration) string {
	const day = 24 * time.Hour
	if d >= 2*day && d%day == 0 {
		return fmt.Sprintf("%dd", d/day)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
