package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkResumedTLS13/static-2         	 2000	  500000 ns/op	      2000 handshakes/s	  135624 B/op	     948 allocs/op
BenchmarkResumedTLS13/static-2         	 2000	  500000 ns/op	      1000 handshakes/s	  135624 B/op	     948 allocs/op
BenchmarkResumedTLS13/static-2         	 2000	  500000 ns/op	      3000 handshakes/s	  135624 B/op	     948 allocs/op
BenchmarkResumedTLS13/stdlib-setkeys-1ms-2 	 2000	  500000 ns/op	      1900 handshakes/s	       990 writes/s
BenchmarkResumedTLS13/agent-swap-1ms-2 	 2000	  500000 ns/op	      1990 handshakes/s	       990 writes/s
BenchmarkResumedTLS13Interleaved-2     	 1000	 1500000 ns/op	      2000 agent-hs/s	         1.010 agent/setkeys	         0.9950 agent/static	         0.9990 agent/static-p50	         1.002 agent/setkeys-p50	      1980 setkeys-hs/s	      2010 static-hs/s
BenchmarkHandshakeTLS13/X25519MLKEM768-2 	 200	 1800000 ns/op	      1000 full-us	         2.000 full/resumed	         2.100 full/resumed-p50	       500.0 resumed-us
BenchmarkHandshakeTLS13/X25519-2       	 300	 1100000 ns/op	       800.0 full-us	         4.000 full/resumed	         4.100 full/resumed-p50	       200.0 resumed-us
BenchmarkClassicalResumption-2 	    1366	   1894176 ns/op	       300.0 classical-server-us	         0.7500 classical/hybrid	         0.7000 classical/hybrid-mean	       400.0 hybrid-server-us
BenchmarkECH-2   	     318	   7608854 ns/op	       800.0 ech-published-server-us	         1.333 ech-published/plain	      1400 ech-oldest-server-us	         2.333 ech-oldest/plain	       200.0 ech-per-key-tried-us	       600.0 plain-server-us
BenchmarkTicketScope/TLS13-2         	    2000	   4907007 ns/op	       990.0 scoped-hs/s	       101.0 scoped-server-us	         0.9900 scoped/unbound	         0.9950 scoped/unbound-p50	         0.9901 scoped/unbound-server	      1000 unbound-hs/s	       100.0 unbound-server-us
BenchmarkTicketScope/TLS12-2         	    2000	    932263 ns/op	      1960 scoped-hs/s	        51.00 scoped-server-us	         0.9800 scoped/unbound	         0.9700 scoped/unbound-p50	         0.9804 scoped/unbound-server	      2000 unbound-hs/s	        50.00 unbound-server-us
BenchmarkDecryptTicket/oldest-of-1-2   	 1000000	  1000 ns/op
BenchmarkDecryptTicket/oldest-of-4-2   	 1000000	  2500 ns/op
BenchmarkDecryptTicket/oldest-of-16-2  	 1000000	  8500 ns/op
PASS
`

func TestReport(t *testing.T) {
	res, failed, err := parse(strings.NewReader(sample), io.Discard)
	if err != nil || failed {
		t.Fatalf("parse: %v, failed %v", err, failed)
	}
	if got := median(res["BenchmarkResumedTLS13/static"]["handshakes/s"]); got != 2000 {
		t.Errorf("median static = %v, want 2000", got)
	}
	var out bytes.Buffer
	if err := report(&out, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| **(c)/(a)** | 0.995 | 0.995 | 0.999 |",
		"| **(c)/(b)** | 1.047 | 1.010 | 1.002 |",
		"| full / resumed | 2.00× | 4.00× |",
		"| full / resumed, median handshake | 2.10× | 4.10× |",
		"| full | 1000 µs | 800 µs |",
		"| 16 | 8.50 µs |",
		"| server CPU per handshake, median | 400 µs | 300 µs | **0.750** |",
		"| server CPU per handshake, ratio of the means | | | 0.700 |",
		"| each further key tried | 500 ns |",
		"| ECH, client holding the published config (the first key) | 800 µs | **1.33×** |",
		"| ECH, client holding the oldest of 4 configs | 1400 µs | **2.33×** |",
		"| each further key tried | 200 µs | |",
		"Target (c)/(a) >= 0.98: interleaved throughput met, interleaved median met.",
		"| **scoped/unbound**, throughput | 0.990 | 0.980 |",
		"| scoped (default) | 990 hs/s, server 101 µs | 1960 hs/s, server 51 µs |",
		"Target scoped/unbound >= 0.98, median handshake: TLS 1.3 met, TLS 1.2 NOT met; server CPU: TLS 1.3 met, TLS 1.2 met.",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestReportNeedsEveryBenchmark(t *testing.T) {
	res, _, _ := parse(strings.NewReader("BenchmarkResumedTLS13/static-2 10 5 ns/op 2 handshakes/s\n"), io.Discard)
	if err := report(io.Discard, res); err == nil {
		t.Fatal("report succeeded without the other benchmarks")
	}
}

func TestParseSeesFailure(t *testing.T) {
	if _, failed, _ := parse(strings.NewReader("--- FAIL: BenchmarkX\nFAIL\n"), io.Discard); !failed {
		t.Fatal("failure not seen")
	}
}
