package docs

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// root is the repository, seen from this package's directory.
const root = ".."

// page is one Markdown file: its path from the repository root and text.
type page struct {
	path string
	text string
}

// pages reads README.md and every Markdown file under docs/.
func pages(t *testing.T) []page {
	t.Helper()
	var out []page
	read := func(rel string) {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page{path: rel, text: string(b)})
	}
	read("README.md")
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			read(filepath.ToSlash(filepath.Join("docs", p)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// docsText is the text of every page under docs/, which must document the
// names the code defines.
func docsText(t *testing.T) string {
	var b strings.Builder
	for _, p := range pages(t) {
		if strings.HasPrefix(p.path, "docs/") {
			b.WriteString(p.text)
			b.WriteString("\n")
		}
	}
	return b.String()
}

func docPage(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// goFiles parses the non-test Go files under dir (relative to the root),
// skipping dirs named in skip.
func goFiles(t *testing.T, dir string, recursive bool) []*ast.File {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	base := filepath.Join(root, dir)
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != base && (!recursive || strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "testdata" ||
				filepath.ToSlash(p) == filepath.ToSlash(filepath.Join(root, "hack/tools")) || filepath.ToSlash(p) == filepath.ToSlash(filepath.Join(root, "docs"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func goFile(t *testing.T, rel string) *ast.File {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, rel), nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// stringConsts maps each string constant's name to its value.
func stringConsts(files ...*ast.File) map[string]string {
	out := map[string]string{}
	for _, f := range files {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					if v, ok := stringLit(vs.Values[i]); ok {
						out[name.Name] = v
					}
				}
			}
		}
	}
	return out
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	v, err := strconv.Unquote(lit.Value)
	return v, err == nil
}

// conditionNames is every condition type and reason of
// api/v1alpha1/conditions.go.
func conditionNames(t *testing.T) []string {
	var out []string
	for _, v := range stringConsts(goFile(t, "api/v1alpha1/conditions.go")) {
		out = append(out, v)
	}
	slices.Sort(out)
	if len(out) < 10 {
		t.Fatalf("found only %d constants in api/v1alpha1/conditions.go", len(out))
	}
	return out
}

// eventReasons is every event reason the code under internal/ and cmd/
// gives as a literal or a constant of api/v1alpha1; reasons computed at run
// time are condition reasons, which conditionNames covers.
func eventReasons(t *testing.T) []string {
	api := stringConsts(goFiles(t, "api/v1alpha1", false)...)
	var files []*ast.File
	files = append(files, goFiles(t, "internal", true)...)
	files = append(files, goFiles(t, "cmd", true)...)
	seen := map[string]bool{}
	calls := 0
	for _, f := range files {
		local := stringConsts(f)
		reason := func(r ast.Expr) {
			switch r := r.(type) {
			case *ast.BasicLit:
				if v, ok := stringLit(r); ok {
					seen[v] = true
				}
			case *ast.SelectorExpr:
				if x, ok := r.X.(*ast.Ident); ok && x.Name == "v1alpha1" {
					v, ok := api[r.Sel.Name]
					if !ok {
						t.Errorf("event reason v1alpha1.%s is no string constant of api/v1alpha1", r.Sel.Name)
					}
					seen[v] = true
				}
			case *ast.Ident:
				if v, ok := local[r.Name]; ok {
					seen[v] = true
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			// The events a ring's pass reports (ringplan.Event, and the
			// Warn table's reasons), which the controllers emit.
			if lit, ok := n.(*ast.CompositeLit); ok && isEventLiteral(lit.Type) {
				elts := lit.Elts
				if _, ok := lit.Type.(*ast.ArrayType); ok {
					elts = nil
					for _, e := range lit.Elts {
						if inner, ok := e.(*ast.CompositeLit); ok && inner.Type == nil {
							elts = append(elts, inner.Elts...)
						}
					}
				}
				for _, e := range elts {
					if kv, ok := e.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Reason" {
							calls++
							reason(kv.Value)
						}
					}
				}
				return true
			}
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !slices.Contains([]string{"Event", "Eventf", "AnnotatedEventf"}, sel.Sel.Name) {
				return true
			}
			typ := slices.IndexFunc(call.Args, isEventType)
			if typ < 0 || typ+1 >= len(call.Args) {
				return true
			}
			calls++
			reason(call.Args[typ+1])
			return true
		})
	}
	if calls == 0 || len(seen) == 0 {
		t.Fatalf("found %d event calls and %d reasons: the recorder's calls changed shape", calls, len(seen))
	}
	var out []string
	for r := range seen {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// isEventLiteral reports whether a composite literal's type is an event a
// ring's pass reports or a row of a kind's Warn table: ringplan.Event or
// ringplan.Warn (Event and Warn inside package ringplan).
func isEventLiteral(t ast.Expr) bool {
	switch t := t.(type) {
	case *ast.SelectorExpr:
		x, ok := t.X.(*ast.Ident)
		return ok && x.Name == "ringplan" && (t.Sel.Name == "Event" || t.Sel.Name == "Warn")
	case *ast.Ident:
		return t.Name == "Event" || t.Name == "Warn"
	case *ast.ArrayType:
		// []ringplan.Event{{Reason: ...}}: its elements' type is elided.
		return isEventLiteral(t.Elt)
	}
	return false
}

// isEventType reports whether e is an event's type: corev1.EventTypeNormal
// or Warning, "Normal" or "Warning", or a variable holding one (typ).
func isEventType(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.SelectorExpr:
		return e.Sel.Name == "EventTypeNormal" || e.Sel.Name == "EventTypeWarning"
	case *ast.BasicLit:
		v, _ := stringLit(e)
		return v == "Normal" || v == "Warning"
	case *ast.Ident:
		n := strings.ToLower(e.Name)
		return n == "typ" || n == "eventtype" || n == "etype"
	}
	return false
}

var metricName = regexp.MustCompile(`^ringmaster_[a-z0-9_]*[a-z0-9]$`)

// metrics is every ringmaster_ metric name the code gives as a string
// literal.
func metrics(t *testing.T) []string {
	seen := map[string]bool{}
	for _, f := range goFiles(t, ".", true) {
		ast.Inspect(f, func(n ast.Node) bool {
			if v, ok := n.(*ast.BasicLit); ok {
				if s, ok := stringLit(v); ok && metricName.MatchString(s) {
					seen[s] = true
				}
			}
			return true
		})
	}
	var out []string
	for m := range seen {
		out = append(out, m)
	}
	slices.Sort(out)
	if len(out) < 10 {
		t.Fatalf("found only %d ringmaster_ metrics in the code", len(out))
	}
	return out
}

var flagFuncs = map[string]int{ // the index of the flag's name
	"String": 0, "Bool": 0, "Int": 0, "Int64": 0, "Uint": 0, "Uint64": 0, "Float64": 0, "Duration": 0, "Func": 0, "BoolFunc": 0,
	"StringVar": 1, "BoolVar": 1, "IntVar": 1, "Int64Var": 1, "UintVar": 1, "Uint64Var": 1, "Float64Var": 1, "DurationVar": 1, "Var": 1, "TextVar": 1,
}

// flags is every flag the files define on the flag package or a FlagSet.
func flags(t *testing.T, files ...*ast.File) []string {
	var out []string
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			i, ok := flagFuncs[sel.Sel.Name]
			if !ok || i >= len(call.Args) {
				return true
			}
			x, ok := sel.X.(*ast.Ident)
			if !ok || (x.Name != "flag" && x.Name != "fs") {
				return true
			}
			if name, ok := stringLit(call.Args[i]); ok {
				out = append(out, name)
			}
			return true
		})
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func operatorFlags(t *testing.T) []string {
	out := flags(t, goFile(t, "main.go"))
	if len(out) < 5 {
		t.Fatalf("found only %d flags in main.go", len(out))
	}
	return out
}

func agentFlags(t *testing.T) []string {
	out := flags(t, goFiles(t, "cmd/ringmaster-agent", false)...)
	if len(out) < 5 {
		t.Fatalf("found only %d flags in cmd/ringmaster-agent", len(out))
	}
	return out
}

// tableColumn is the first cell of each row of the tables in text whose
// first header cell is header, where that cell is one `code` span.
func tableColumn(text, header string) []string {
	var out []string
	in := false
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			in = false
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		first := strings.TrimSpace(cells[0])
		switch {
		case !in && first == header:
			in = true
		case in && strings.HasPrefix(first, "---"):
		case in && len(first) > 2 && strings.Count(first, "`") == 2 && strings.HasPrefix(first, "`") && strings.HasSuffix(first, "`"):
			out = append(out, strings.Trim(first, "`"))
		}
	}
	return out
}

func TestDocsNameEveryConditionTypeAndReason(t *testing.T) {
	text := docsText(t)
	for _, r := range conditionNames(t) {
		if !strings.Contains(text, "`"+r+"`") {
			t.Errorf("condition type or reason %q (api/v1alpha1/conditions.go) appears in no page under docs/", r)
		}
	}
}

func TestDocsNameEveryEventReason(t *testing.T) {
	text := docsText(t)
	for _, r := range eventReasons(t) {
		if !strings.Contains(text, "`"+r+"`") {
			t.Errorf("event reason %q appears in no page under docs/", r)
		}
	}
}

func TestDocsNameOnlyReasonsOfTheCode(t *testing.T) {
	known := append(conditionNames(t), eventReasons(t)...)
	rows := tableColumn(docPage(t, "docs/operations.md"), "reason")
	if len(rows) < 10 {
		t.Fatalf("docs/operations.md's reason tables hold only %d reasons", len(rows))
	}
	for _, r := range rows {
		if !slices.Contains(known, r) {
			t.Errorf("docs/operations.md lists reason %q, which the code does not define", r)
		}
	}
}

func TestDocsNameEveryMetric(t *testing.T) {
	text := docsText(t)
	for _, m := range metrics(t) {
		if !regexp.MustCompile("`" + m + `[{` + "`]").MatchString(text) {
			t.Errorf("metric %s appears in no page under docs/", m)
		}
	}
}

var docMetric = regexp.MustCompile(`ringmaster_[a-z0-9_]+`)

func TestDocsNameOnlyMetricsOfTheCode(t *testing.T) {
	code := metrics(t)
	for _, p := range pages(t) {
		for _, loc := range docMetric.FindAllStringIndex(p.text, -1) {
			m := p.text[loc[0]:loc[1]]
			if strings.HasPrefix(p.text[loc[1]:], ".yaml") || strings.HasPrefix(m, "ringmaster_v1alpha1_") {
				continue // a sample's file name
			}
			if strings.HasSuffix(m, "_") { // a prefix, as in ringmaster_agent_*
				if !slices.ContainsFunc(code, func(c string) bool { return strings.HasPrefix(c, m) }) {
					t.Errorf("%s names metrics %s*, and the code has none", p.path, m)
				}
				continue
			}
			base := m
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				if b, ok := strings.CutSuffix(m, suffix); ok && slices.Contains(code, b) {
					base = b
				}
			}
			if !slices.Contains(code, base) {
				t.Errorf("%s names metric %s, which the code does not register", p.path, m)
			}
		}
	}
}

// codeName is a code span naming a Go identifier of a package: `pkg.Name`,
// `pkg.Type.Member`, or either after a directory (`internal/keyring.Next`),
// with arguments or a literal's braces after it.
var codeName = regexp.MustCompile("`((?:[a-z0-9_.-]+/)*)([a-z][a-z0-9]*)\\.([A-Z][A-Za-z0-9_]*)(?:\\.([A-Za-z_][A-Za-z0-9_]*))?(?:\\([^`]*\\)|\\{[^`]*\\})?`")

// goNames is what the module's non-test Go files declare, per package:
// its top-level names, and each type's methods and fields (those of the
// types it embeds too).
type goNames struct {
	top     map[string]bool
	members map[string]map[string]bool // type -> member
	embeds  map[string][]string        // type -> embedded types of the package
}

func (n goNames) has(typ, member string) bool {
	seen := map[string]bool{}
	var walk func(string) bool
	walk = func(typ string) bool {
		if seen[typ] {
			return false
		}
		seen[typ] = true
		return n.members[typ][member] || slices.ContainsFunc(n.embeds[typ], walk)
	}
	return walk(typ)
}

// declaredNames maps each package's directory (from the root) and each
// package name to what it declares; a name that several packages share
// holds what all of them declare.
func declaredNames(t *testing.T) (byDir, byName map[string]goNames) {
	byDir, byName = map[string]goNames{}, map[string]goNames{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "testdata" || rel == "hack/tools") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, n := range []goNames{namesOf(byDir, filepath.ToSlash(filepath.Dir(rel))), namesOf(byName, f.Name.Name)} {
			addNames(n, f)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return byDir, byName
}

func namesOf(m map[string]goNames, key string) goNames {
	if _, ok := m[key]; !ok {
		m[key] = goNames{top: map[string]bool{}, members: map[string]map[string]bool{}, embeds: map[string][]string{}}
	}
	return m[key]
}

func addNames(n goNames, f *ast.File) {
	member := func(typ, name string) {
		if n.members[typ] == nil {
			n.members[typ] = map[string]bool{}
		}
		n.members[typ][name] = true
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				n.top[d.Name.Name] = true
				continue
			}
			typ := d.Recv.List[0].Type
			for {
				switch x := typ.(type) {
				case *ast.StarExpr:
					typ = x.X
					continue
				case *ast.IndexExpr:
					typ = x.X
					continue
				case *ast.IndexListExpr:
					typ = x.X
					continue
				}
				break
			}
			if id, ok := typ.(*ast.Ident); ok {
				member(id.Name, d.Name.Name)
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.ValueSpec:
					for _, id := range s.Names {
						n.top[id.Name] = true
					}
				case *ast.TypeSpec:
					n.top[s.Name.Name] = true
					var fields *ast.FieldList
					switch x := s.Type.(type) {
					case *ast.StructType:
						fields = x.Fields
					case *ast.InterfaceType:
						fields = x.Methods
					case *ast.Ident: // a type defined from, or an alias of, another of the package
						n.embeds[s.Name.Name] = append(n.embeds[s.Name.Name], x.Name)
					}
					if fields == nil {
						continue
					}
					for _, field := range fields.List {
						for _, id := range field.Names {
							member(s.Name.Name, id.Name)
						}
						if len(field.Names) == 0 {
							typ := field.Type
							if star, ok := typ.(*ast.StarExpr); ok {
								typ = star.X
							}
							switch x := typ.(type) {
							case *ast.Ident:
								member(s.Name.Name, x.Name)
								n.embeds[s.Name.Name] = append(n.embeds[s.Name.Name], x.Name)
							case *ast.SelectorExpr:
								member(s.Name.Name, x.Sel.Name)
							}
						}
					}
				}
			}
		}
	}
}

// TestDocsNameOnlyCodeThatExists: every `pkg.Name` and `pkg.Type.Member`
// the README and the pages under docs/ (design.md among them) name, where
// pkg is a package of this module, is declared there. A name of another
// module's package of the same name (controller-runtime's controller, say)
// is written with its import path.
func TestDocsNameOnlyCodeThatExists(t *testing.T) {
	byDir, byName := declaredNames(t)
	checked := map[string]int{}
	for _, p := range pages(t) {
		for _, m := range codeName.FindAllStringSubmatch(fence.ReplaceAllString(p.text, ""), -1) {
			span, dir, pkg, name, member := m[0], m[1], m[2], m[3], m[4]
			names, ok := byName[pkg]
			if dir != "" {
				names, ok = byDir[dir+pkg]
			}
			if !ok {
				continue // another module's package
			}
			checked[p.path]++
			switch {
			case !names.top[name]:
				t.Errorf("%s names %s: package %s declares no %s", p.path, span, pkg, name)
			case member != "" && !names.has(name, member):
				t.Errorf("%s names %s: %s.%s has no method or field %s", p.path, span, pkg, name, member)
			}
		}
	}
	for _, page := range []string{"docs/design.md", "docs/agent.md"} {
		if checked[page] < 3 {
			t.Errorf("found only %d code names in %s: the pattern no longer matches how the page writes them", checked[page], page)
		}
	}
}

func TestDocsNameEveryFlag(t *testing.T) {
	for _, tt := range []struct {
		page  string
		flags []string
	}{
		{"docs/operations.md", operatorFlags(t)},
		{"docs/sidecar.md", agentFlags(t)},
	} {
		documented := tableColumn(docPage(t, tt.page), "flag")
		for _, f := range tt.flags {
			if !slices.Contains(documented, "--"+f) {
				t.Errorf("flag --%s is missing from the flag table of %s", f, tt.page)
			}
		}
		for _, d := range documented {
			if !slices.Contains(tt.flags, strings.TrimPrefix(d, "--")) {
				t.Errorf("%s documents flag %s, which the code does not define", tt.page, d)
			}
		}
	}
}

var (
	link    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	fence   = regexp.MustCompile("(?ms)^```.*?^```")
	notSlug = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

// anchors is every heading anchor of a Markdown text, as GitHub makes them.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	count := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
		s := strings.ReplaceAll(notSlug.ReplaceAllString(strings.ToLower(strings.TrimSpace(m[1])), ""), " ", "-")
		if n := count[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		count[s]++
	}
	return out
}

func TestRelativeLinksResolve(t *testing.T) {
	for _, p := range pages(t) {
		for _, m := range link.FindAllStringSubmatch(fence.ReplaceAllString(p.text, ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			rel := p.path
			if file != "" {
				rel = filepath.ToSlash(filepath.Join(filepath.Dir(p.path), file))
				if _, err := os.Stat(filepath.Join(root, rel)); err != nil {
					t.Errorf("%s links to %s, which does not exist", p.path, target)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(rel, ".md") {
				t.Errorf("%s links to an anchor of %s, which is no Markdown file", p.path, target)
				continue
			}
			if !anchors(docPage(t, rel))[anchor] {
				t.Errorf("%s links to %s: %s has no heading #%s", p.path, target, rel, anchor)
			}
		}
	}
}

func TestLayoutMatchesTheTree(t *testing.T) {
	text := docPage(t, "docs/development.md")
	_, after, ok := strings.Cut(text, "## Layout")
	if !ok {
		t.Fatal("docs/development.md has no Layout section")
	}
	block := fence.FindString(after)
	n := 0
	for _, line := range strings.Split(block, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasSuffix(f[0], "/") {
			continue
		}
		n++
		if st, err := os.Stat(filepath.Join(root, f[0])); err != nil || !st.IsDir() {
			t.Errorf("the layout lists %s, which is no directory of the tree", f[0])
		}
	}
	if n < 10 {
		t.Fatalf("the layout lists only %d directories", n)
	}
	// And the other way: every package of internal/ and pkg/ is listed by
	// itself, every other package under a listed directory, and every
	// top-level directory is listed.
	listed := map[string]bool{}
	for _, line := range strings.Split(block, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasSuffix(f[0], "/") {
			listed[strings.TrimSuffix(f[0], "/")] = true
		}
	}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		name := d.Name()
		if rel != "." && (strings.HasPrefix(name, ".") || name == "bin" || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		if rel == "." {
			return nil
		}
		if !strings.Contains(rel, "/") {
			under := false
			for l := range listed {
				under = under || l == rel || strings.HasPrefix(l, rel+"/")
			}
			if !under {
				t.Errorf("the layout lists no %s/, a top-level directory of the tree", rel)
			}
			return nil
		}
		if !hasGo(path) || listed[rel] {
			return nil
		}
		if strings.HasPrefix(rel, "internal/") || strings.HasPrefix(rel, "pkg/") {
			t.Errorf("the layout lists no %s/, a package", rel)
			return nil
		}
		for dir := filepath.Dir(rel); dir != "."; dir = filepath.Dir(dir) {
			if listed[dir] {
				return nil
			}
		}
		t.Errorf("the layout lists neither %s/, a package, nor a directory above it", rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// goPackage is what go list tells of one package of the module.
type goPackage struct {
	ImportPath   string
	GoFiles      []string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// modulePackages lists the module's packages with every build tag its
// tests use, so that no file's imports are left out.
func modulePackages(t *testing.T) (module string, pkgs map[string]goPackage) {
	t.Helper()
	run := func(args ...string) []byte {
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		cmd.Stderr = new(strings.Builder)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, cmd.Stderr)
		}
		return out
	}
	module = strings.TrimSpace(string(run("list", "-m")))
	pkgs = map[string]goPackage{}
	dec := json.NewDecoder(bytes.NewReader(run("list", "-tags", "integration,e2e,cluster", "-json=ImportPath,GoFiles,Imports,TestImports,XTestImports", "./...")))
	for dec.More() {
		var p goPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs[p.ImportPath] = p
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return module, pkgs
}

// TestTestSupportLivesUnderInternalTesting: a package under internal/ that
// no part of the shipped code imports (only tests, test/ or hack/, or other
// such packages) is test support, and lives under internal/testing/; and
// nothing shipped imports a package of internal/testing/. What is shipped
// is every package outside internal/, test/ and hack/ (the binaries, pkg/,
// api/, examples/), and what those import in their non-test files, through
// any number of packages.
func TestTestSupportLivesUnderInternalTesting(t *testing.T) {
	module, pkgs := modulePackages(t)
	rel := func(path string) string {
		if path == module {
			return "."
		}
		return strings.TrimPrefix(path, module+"/")
	}
	under := func(path, dir string) bool {
		r := rel(path)
		return r == dir || strings.HasPrefix(r, dir+"/")
	}
	// shipped maps each shipped package to the one that first imported it.
	shipped := map[string]string{}
	var queue []string
	for path := range pkgs {
		if !slices.Contains(strings.Split(rel(path), "/"), "internal") && !under(path, "test") && !under(path, "hack") {
			shipped[path] = ""
			queue = append(queue, path)
		}
	}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, imp := range pkgs[p].Imports {
			if _, ok := pkgs[imp]; !ok {
				continue
			}
			if _, seen := shipped[imp]; !seen {
				shipped[imp] = p
				queue = append(queue, imp)
			}
		}
	}
	importers := map[string][]string{}
	for path, p := range pkgs {
		for _, imp := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
			if imp != path && !slices.Contains(importers[imp], rel(path)) {
				importers[imp] = append(importers[imp], rel(path))
			}
		}
	}
	n := 0
	for _, path := range slices.Sorted(maps.Keys(pkgs)) {
		switch _, ok := shipped[path]; {
		case under(path, "internal/testing"):
			n++
			if ok {
				chain := []string{rel(path)}
				for by := shipped[path]; by != ""; by = shipped[by] {
					chain = append(chain, rel(by))
				}
				t.Errorf("%s is test support, yet shipped code imports it: %s", rel(path), strings.Join(chain, " <- "))
			}
		case under(path, "internal") && !ok && len(pkgs[path].GoFiles) > 0: // not a suite of tests alone
			by := importers[path]
			slices.Sort(by)
			t.Errorf("%s is imported only by tests, test/, hack/ and test support (by %s): move it under internal/testing/", rel(path), strings.Join(by, ", "))
		}
	}
	if n < 5 {
		t.Fatalf("go list found only %d packages under internal/testing/", n)
	}
}

// hasGo reports whether dir holds a Go file that is not a test.
func hasGo(dir string) bool {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".go") && !strings.HasSuffix(e.Name(), "_test.go") {
			return true
		}
	}
	return false
}

var alertName = regexp.MustCompile(`(?m)^\s*- alert: (\S+)`)

func TestDocsNameEveryAlert(t *testing.T) {
	rule := docPage(t, "charts/ringmaster/templates/prometheusrule.yaml")
	alerts := alertName.FindAllStringSubmatch(rule, -1)
	if len(alerts) == 0 {
		t.Fatal("the chart's PrometheusRule holds no alert")
	}
	documented := tableColumn(docPage(t, "docs/operations.md"), "alert")
	var names []string
	for _, a := range alerts {
		names = append(names, a[1])
		if !slices.Contains(documented, a[1]) {
			t.Errorf("alert %s of the chart is missing from the alert table of docs/operations.md", a[1])
		}
	}
	for _, d := range documented {
		if !slices.Contains(names, d) {
			t.Errorf("docs/operations.md documents alert %s, which the chart does not define", d)
		}
	}
}

// recipeBlock is a YAML block of a page whose first line names the file
// it shows: "# gateways/<module>/manifests/<file>.yaml: …".
var recipeBlock = regexp.MustCompile("(?ms)^```yaml\n(# (gateways/[^\\s:]+):.*?\n)```")

// TestGatewayRecipesAreTheTestedFiles: every recipe the gateway pages show
// is, byte for byte, the manifest that gateways/'s modules test (make
// test-gateways), and every such manifest is shown in docs/gateways.md.
func TestGatewayRecipesAreTheTestedFiles(t *testing.T) {
	shown := map[string]bool{}
	for _, rel := range []string{"docs/gateways.md", "docs/sidecar.md"} {
		for _, m := range recipeBlock.FindAllStringSubmatch(docPage(t, rel), -1) {
			block, path := m[1], m[2]
			if rel == "docs/gateways.md" {
				shown[path] = true
			}
			b, err := os.ReadFile(filepath.Join(root, path))
			if err != nil {
				t.Errorf("%s shows %s: %v", rel, path, err)
				continue
			}
			if string(b) != block {
				t.Errorf("%s shows %s, but not as the file is: copy the file into the page", rel, path)
			}
		}
	}
	files, err := filepath.Glob(filepath.Join(root, "gateways", "*", "manifests", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no manifest under gateways/*/manifests")
	}
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		if !shown[filepath.ToSlash(rel)] {
			t.Errorf("docs/gateways.md does not show %s", filepath.ToSlash(rel))
		}
	}
}
