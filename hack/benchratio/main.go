// Command benchratio reads `go test -bench` output for pkg/agent on stdin,
// passes it through, and then prints the figures issue 3 asks for as a
// Markdown table: resumed TLS 1.3 handshakes per second for (a) a static
// config, (b) a shared stdlib config rewritten with SetSessionTicketKeys
// every 1 ms, (c) the agent swapping configs every 1 ms, the ratios (c)/(a)
// and (c)/(b), full against resumed handshake cost, the cost of decrypting
// a ticket under the oldest of 1, 4 and 16 keys, and the server's
// processor time per resumed TLS 1.3 handshake without and with
// agent.Options.ClassicalResumption (issue 17), and the server's processor
// time per full TLS 1.3 handshake without ECH, with ECH under the
// published config, and under the oldest of echring.MaxConfigs (issue 26),
// and what binding each ticket to its scope costs a resumed handshake, TLS
// 1.3 and 1.2, against the agent without the binding (issue 47).
//
// Every figure is the median over the runs of -count, so one disturbed run
// does not move it. Ratios come from two sources: the sequential
// sub-benchmarks of BenchmarkResumedTLS13, and BenchmarkResumedTLS13Interleaved,
// which alternates the variants handshake by handshake and so is the one to
// trust on a machine with other load.
//
//	go test -run '^$' -bench . -count 5 ./pkg/agent | go run ./hack/benchratio
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// procSuffix is the -GOMAXPROCS suffix go test appends to benchmark names.
var procSuffix = regexp.MustCompile(`-\d+$`)

// results maps benchmark name (without suffix) to unit to one value per run.
type results map[string]map[string][]float64

func main() {
	res, failed, err := parse(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchratio:", err)
		os.Exit(1)
	}
	if failed {
		fmt.Fprintln(os.Stderr, "benchratio: the benchmarks failed")
		os.Exit(1)
	}
	if err := report(os.Stdout, res); err != nil {
		fmt.Fprintln(os.Stderr, "benchratio:", err)
		os.Exit(1)
	}
}

// parse reads benchmark output, copying it to echo, and collects every
// "value unit" pair of every Benchmark line.
func parse(r io.Reader, echo io.Writer) (results, bool, error) {
	res := results{}
	failed := false
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(echo, line)
		if strings.HasPrefix(line, "FAIL") || strings.HasPrefix(line, "--- FAIL") {
			failed = true
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		name := procSuffix.ReplaceAllString(f[0], "")
		if res[name] == nil {
			res[name] = map[string][]float64{}
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			res[name][f[i+1]] = append(res[name][f[i+1]], v)
		}
	}
	return res, failed, sc.Err()
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func report(w io.Writer, res results) error {
	get := func(name, unit string) (float64, int, error) {
		v := res[name][unit]
		if len(v) == 0 {
			return 0, 0, fmt.Errorf("no %q for %s in the input", unit, name)
		}
		return median(v), len(v), nil
	}
	var err error
	must := func(name, unit string) (float64, int) {
		v, n, e := get(name, unit)
		if err == nil {
			err = e
		}
		return v, n
	}

	a, runs := must("BenchmarkResumedTLS13/static", "handshakes/s")
	b, _ := must("BenchmarkResumedTLS13/stdlib-setkeys-1ms", "handshakes/s")
	c, _ := must("BenchmarkResumedTLS13/agent-swap-1ms", "handshakes/s")
	ia, _ := must("BenchmarkResumedTLS13Interleaved", "static-hs/s")
	ib, _ := must("BenchmarkResumedTLS13Interleaved", "setkeys-hs/s")
	ic, _ := must("BenchmarkResumedTLS13Interleaved", "agent-hs/s")
	ica, _ := must("BenchmarkResumedTLS13Interleaved", "agent/static")
	icb, _ := must("BenchmarkResumedTLS13Interleaved", "agent/setkeys")
	pca, _ := must("BenchmarkResumedTLS13Interleaved", "agent/static-p50")
	pcb, _ := must("BenchmarkResumedTLS13Interleaved", "agent/setkeys-p50")
	const hs = "BenchmarkHandshakeTLS13/"
	full, _ := must(hs+"X25519MLKEM768", "full-us")
	resumed, _ := must(hs+"X25519MLKEM768", "resumed-us")
	ratio, _ := must(hs+"X25519MLKEM768", "full/resumed")
	ratioP50, _ := must(hs+"X25519MLKEM768", "full/resumed-p50")
	fullX, _ := must(hs+"X25519", "full-us")
	resumedX, _ := must(hs+"X25519", "resumed-us")
	ratioX, _ := must(hs+"X25519", "full/resumed")
	ratioXP50, _ := must(hs+"X25519", "full/resumed-p50")
	const cl = "BenchmarkClassicalResumption"
	srvHybrid, _ := must(cl, "hybrid-server-us")
	srvClassical, _ := must(cl, "classical-server-us")
	srvRatio, _ := must(cl, "classical/hybrid")
	srvRatioMean, _ := must(cl, "classical/hybrid-mean")
	const ech = "BenchmarkECH"
	echPlain, _ := must(ech, "plain-server-us")
	echPublished, _ := must(ech, "ech-published-server-us")
	echOldest, _ := must(ech, "ech-oldest-server-us")
	echPublishedRatio, _ := must(ech, "ech-published/plain")
	echOldestRatio, _ := must(ech, "ech-oldest/plain")
	echPerKey, _ := must(ech, "ech-per-key-tried-us")
	const sc = "BenchmarkTicketScope/"
	type scopeFigures struct{ unbound, scoped, ratio, ratioP50, srvUnbound, srvScoped, srvRatio float64 }
	var scope [2]scopeFigures
	for i, v := range []string{"TLS13", "TLS12"} {
		f := &scope[i]
		f.unbound, _ = must(sc+v, "unbound-hs/s")
		f.scoped, _ = must(sc+v, "scoped-hs/s")
		f.ratio, _ = must(sc+v, "scoped/unbound")
		f.ratioP50, _ = must(sc+v, "scoped/unbound-p50")
		f.srvUnbound, _ = must(sc+v, "unbound-server-us")
		f.srvScoped, _ = must(sc+v, "scoped-server-us")
		f.srvRatio, _ = must(sc+v, "scoped/unbound-server")
	}
	var dec [3]float64
	for i, n := range []int{1, 4, 16} {
		dec[i], _ = must(fmt.Sprintf("BenchmarkDecryptTicket/oldest-of-%d", n), "ns/op")
	}
	if err != nil {
		return err
	}

	us := func(hs float64) string { return fmt.Sprintf("%.1f µs", 1e6/hs) }
	fmt.Fprintf(w, "\nMedians over %d run(s) of -count.\n\n", runs)
	fmt.Fprintln(w, "| resumed TLS 1.3 handshakes | sequential | interleaved | interleaved, median handshake |")
	fmt.Fprintln(w, "|---|---|---|---|")
	fmt.Fprintf(w, "| (a) static config | %.0f hs/s (%s) | %.0f hs/s (%s) | |\n", a, us(a), ia, us(ia))
	fmt.Fprintf(w, "| (b) stdlib config, SetSessionTicketKeys every 1 ms | %.0f hs/s (%s) | %.0f hs/s (%s) | |\n", b, us(b), ib, us(ib))
	fmt.Fprintf(w, "| (c) agent, config swapped every 1 ms | %.0f hs/s (%s) | %.0f hs/s (%s) | |\n", c, us(c), ic, us(ic))
	fmt.Fprintf(w, "| **(c)/(a)** | %.3f | %.3f | %.3f |\n", c/a, ica, pca)
	fmt.Fprintf(w, "| **(c)/(b)** | %.3f | %.3f | %.3f |\n", c/b, icb, pcb)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| handshake, both ends, interleaved (TLS 1.3, ECDSA P-256, static config) | X25519MLKEM768 (Go's default) | X25519 |")
	fmt.Fprintln(w, "|---|---|---|")
	fmt.Fprintf(w, "| full | %.0f µs | %.0f µs |\n", full, fullX)
	fmt.Fprintf(w, "| resumed | %.0f µs | %.0f µs |\n", resumed, resumedX)
	fmt.Fprintf(w, "| full / resumed | %.2f× | %.2f× |\n", ratio, ratioX)
	fmt.Fprintf(w, "| full / resumed, median handshake | %.2f× | %.2f× |\n", ratioP50, ratioXP50)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| resumed TLS 1.3, agent's config, interleaved | X25519MLKEM768 (default) | X25519 (`ClassicalResumption`) | ratio |")
	fmt.Fprintln(w, "|---|---|---|---|")
	fmt.Fprintf(w, "| server CPU per handshake, median | %.0f µs | %.0f µs | **%.3f** |\n", srvHybrid, srvClassical, srvRatio)
	fmt.Fprintf(w, "| server CPU per handshake, ratio of the means | | | %.3f |\n", srvRatioMean)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| full TLS 1.3 handshake, agent's config, interleaved | server CPU per handshake, median | against no ECH |")
	fmt.Fprintln(w, "|---|---|---|")
	fmt.Fprintf(w, "| no ECH | %.0f µs | 1 |\n", echPlain)
	fmt.Fprintf(w, "| ECH, client holding the published config (the first key) | %.0f µs | **%.2f×** |\n", echPublished, echPublishedRatio)
	fmt.Fprintf(w, "| ECH, client holding the oldest of 4 configs | %.0f µs | **%.2f×** |\n", echOldest, echOldestRatio)
	fmt.Fprintf(w, "| each further key tried | %.0f µs | |\n", echPerKey)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| resumed handshake, agent's config, interleaved | TLS 1.3 | TLS 1.2 |")
	fmt.Fprintln(w, "|---|---|---|")
	fmt.Fprintf(w, "| unbound (no WrapSession/UnwrapSession, as before issue 47) | %.0f hs/s, server %.0f µs | %.0f hs/s, server %.0f µs |\n", scope[0].unbound, scope[0].srvUnbound, scope[1].unbound, scope[1].srvUnbound)
	fmt.Fprintf(w, "| scoped (default) | %.0f hs/s, server %.0f µs | %.0f hs/s, server %.0f µs |\n", scope[0].scoped, scope[0].srvScoped, scope[1].scoped, scope[1].srvScoped)
	fmt.Fprintf(w, "| **scoped/unbound**, throughput | %.3f | %.3f |\n", scope[0].ratio, scope[1].ratio)
	fmt.Fprintf(w, "| **scoped/unbound**, median handshake | %.3f | %.3f |\n", scope[0].ratioP50, scope[1].ratioP50)
	fmt.Fprintf(w, "| **scoped/unbound**, server CPU, median (unbound µs / scoped µs) | %.3f | %.3f |\n", scope[0].srvRatio, scope[1].srvRatio)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| DecryptTicket, ticket under the oldest key of | time |")
	fmt.Fprintln(w, "|---|---|")
	for i, n := range []int{1, 4, 16} {
		fmt.Fprintf(w, "| %d | %.2f µs |\n", n, dec[i]/1e3)
	}
	fmt.Fprintf(w, "| each further key tried | %.0f ns |\n", (dec[2]-dec[0])/15)
	fmt.Fprintln(w)
	verdict := func(r float64) string {
		if r >= 0.98 {
			return "met"
		}
		return "NOT met"
	}
	fmt.Fprintf(w, "Target (c)/(a) >= 0.98: interleaved throughput %s, interleaved median %s.\n", verdict(ica), verdict(pca))
	fmt.Fprintf(w, "Target scoped/unbound >= 0.98, median handshake: TLS 1.3 %s, TLS 1.2 %s; server CPU: TLS 1.3 %s, TLS 1.2 %s.\n",
		verdict(scope[0].ratioP50), verdict(scope[1].ratioP50), verdict(scope[0].srvRatio), verdict(scope[1].srvRatio))
	return nil
}
