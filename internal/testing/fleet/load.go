package fleet

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// LoadConfig shapes a load: Clients clients, each reconnecting up to
// ConnsPerClient times, one HTTPS request per connection, until the load is
// stopped or its context ends.
type LoadConfig struct {
	// Addr is where clients connect: the balancer.
	Addr string
	// Roots verifies the replicas' certificate, issued for ServerName.
	Roots *x509.CertPool
	// Version is the one TLS version clients offer: tls.VersionTLS13 or
	// tls.VersionTLS12.
	Version uint16
	// Clients is how many clients run at once, each with its own session
	// cache.
	Clients int
	// ConnsPerClient bounds the connections of each client.
	ConnsPerClient int
	// Interval paces each client: it starts a connection once per Interval
	// on average, each gap drawn at random between half and one and a half
	// Interval. The jitter matters: clients in lockstep would each land on
	// the same replica of a round-robin balancer again and again, so that
	// a fleet would seem to resume without sharing anything. Zero reconnects
	// as fast as it can.
	Interval time.Duration
	// Timeout bounds one connection, dial to last byte.
	Timeout time.Duration
	// Dial opens each connection's TCP stream; nil dials from the
	// harness's own network namespace. The cluster suite dials from inside
	// the single-node cluster's namespace (test/cluster/netns).
	Dial DialFunc
	// ECHConfigList, if set, gives the ECHConfigList client attempts
	// Encrypted Client Hello with on its next connection (what a client
	// that looked the HTTPS record up holds); nil or empty attempts none.
	// ConnectVia retries a rejected attempt once with the server's retry
	// configs.
	ECHConfigList func(client int) []byte
}

// DialFunc opens a stream connection, like net.Dialer.DialContext.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Sample is what one connection observed.
type Sample struct {
	// Client and Seq identify the connection: Seq counts a client's
	// connections from 0.
	Client, Seq int
	// Start is when the client dialled; Latency runs from the dial to the
	// last byte of the response.
	Start   time.Time
	Latency time.Duration
	// Resumed is the client's tls.ConnectionState.DidResume.
	Resumed bool
	// Group is the key exchange the handshake negotiated, Retried whether
	// the server sent a HelloRetryRequest: the client's
	// tls.ConnectionState.CurveID and HelloRetryRequest.
	Group   tls.CurveID
	Retried bool
	// Err is why the connection failed (dial, handshake or request); the
	// other fields but Client, Seq and Start are then unset.
	Err string
	// Backend is the replica address that answered, Epoch and ActiveKey what
	// it served: all from the response body of examples/server.
	Backend   string
	Epoch     int64
	ActiveKey string
	// ECHAccepted is the client's tls.ConnectionState.ECHAccepted.
	// ECHRetried says the server rejected the client's ECH config and sent
	// retry configs, with which the connection was made again (RFC 9849
	// §6.1.6); Start and Latency then cover both attempts.
	ECHAccepted, ECHRetried bool
	// echRetry holds the retry configs of a rejected attempt.
	echRetry []byte
}

// Load is a running load generator.
type Load struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	samples []Sample
}

// StartLoad starts cfg.Clients clients against cfg.Addr. Each keeps a
// tls.ClientSessionCache of its own, as a browser or a service client does,
// and dials again after each request.
func StartLoad(ctx context.Context, cfg LoadConfig) *Load {
	ctx, cancel := context.WithCancel(ctx)
	l := &Load{cancel: cancel}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	for i := range cfg.Clients {
		l.wg.Go(func() { l.client(ctx, cfg, i) })
	}
	return l
}

func (l *Load) client(ctx context.Context, cfg LoadConfig, id int) {
	tc := &tls.Config{
		ServerName:         ServerName,
		RootCAs:            cfg.Roots,
		MinVersion:         cfg.Version,
		MaxVersion:         cfg.Version,
		ClientSessionCache: tls.NewLRUClientSessionCache(1),
		NextProtos:         []string{"http/1.1"},
	}
	// Spread the clients' first dials over one interval, so they do not
	// move in lockstep.
	next := time.Now()
	if cfg.Interval > 0 {
		next = next.Add(rand.N(cfg.Interval))
	}
	for seq := 0; seq < cfg.ConnsPerClient; seq++ {
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			return
		}
		if cfg.Interval > 0 {
			next = next.Add(cfg.Interval/2 + rand.N(cfg.Interval))
		}
		conn := tc
		if cfg.ECHConfigList != nil {
			conn = tc.Clone() // sharing tc's session cache
			conn.EncryptedClientHelloConfigList = cfg.ECHConfigList(id)
		}
		s := ConnectVia(ctx, cfg.Dial, cfg.Addr, conn, cfg.Timeout)
		if ctx.Err() != nil && s.Err != "" {
			return // cut short by Stop: not the fleet's failure
		}
		s.Client, s.Seq = id, seq
		l.mu.Lock()
		l.samples = append(l.samples, s)
		l.mu.Unlock()
	}
}

// Connect makes one connection to addr with tc, sends one GET / and reads
// the answer of examples/server.
func Connect(ctx context.Context, addr string, tc *tls.Config, timeout time.Duration) Sample {
	return ConnectVia(ctx, nil, addr, tc, timeout)
}

// ConnectVia is Connect with the TCP stream opened by dial (nil: from the
// harness's own network namespace). When tc attempts ECH and the server
// rejects it with retry configs, it connects once more with them, as a
// client does (RFC 9849 §6.1.6).
func ConnectVia(ctx context.Context, dial DialFunc, addr string, tc *tls.Config, timeout time.Duration) Sample {
	s := connectOnce(ctx, dial, addr, tc, timeout)
	if s.echRetry == nil {
		return s
	}
	retry := tc.Clone()
	retry.EncryptedClientHelloConfigList = s.echRetry
	start := s.Start
	s = connectOnce(ctx, dial, addr, retry, timeout)
	s.Start, s.ECHRetried = start, true
	if s.Err == "" {
		s.Latency = time.Since(start)
	}
	return s
}

func connectOnce(ctx context.Context, dial DialFunc, addr string, tc *tls.Config, timeout time.Duration) Sample {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s := Sample{Start: time.Now()}
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	raw, err := dial(ctx, "tcp", addr)
	if err != nil {
		s.Err = err.Error()
		return s
	}
	defer raw.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	conn := tls.Client(raw, tc)
	if err := conn.HandshakeContext(ctx); err != nil {
		s.Err = err.Error()
		var rej *tls.ECHRejectionError
		if errors.As(err, &rej) && len(rej.RetryConfigList) > 0 {
			s.echRetry = rej.RetryConfigList
		}
		return s
	}
	req, _ := http.NewRequest(http.MethodGet, "https://"+ServerName+"/", nil)
	req.Close = true
	if err := req.Write(conn); err != nil {
		s.Err = fmt.Sprintf("write request: %v", err)
		return s
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		s.Err = fmt.Sprintf("read response: %v", err)
		return s
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		s.Err = fmt.Sprintf("response %d: %v", resp.StatusCode, err)
		return s
	}
	s.Latency = time.Since(s.Start)
	cs := conn.ConnectionState()
	s.Resumed, s.Group, s.Retried, s.ECHAccepted = cs.DidResume, cs.CurveID, cs.HelloRetryRequest, cs.ECHAccepted
	s.Backend, s.Epoch, s.ActiveKey, err = parseHello(string(body))
	if err != nil {
		s.Err = err.Error()
	}
	return s
}

// parseHello reads examples/server's greeting:
//
//	hello from 127.0.0.1:43121: epoch 3, active key 3f9a1c0d, resumed true
//
// or the greeting nginx and HAProxy give in the harness, which know no
// epoch or key id:
//
//	hello from 127.0.0.1:43121
func parseHello(body string) (backend string, epoch int64, key string, err error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(body), "hello from ")
	if ok && !strings.Contains(rest, " ") && rest != "" {
		return rest, 0, "", nil
	}
	if ok {
		var tail string
		backend, tail, ok = strings.Cut(rest, ": epoch ")
		if ok {
			var e string
			e, tail, ok = strings.Cut(tail, ", active key ")
			epoch, err = strconv.ParseInt(e, 10, 64)
			if ok && err == nil {
				key, _, ok = strings.Cut(tail, ", resumed ")
			}
		}
	}
	if !ok || err != nil {
		return "", 0, "", fmt.Errorf("unexpected response %q", body)
	}
	return backend, epoch, key, nil
}

// Stop ends the load, waits for every client and returns what they saw.
func (l *Load) Stop() Result {
	l.cancel()
	l.wg.Wait()
	return l.Result()
}

// Wait waits until every client has made its connections (or the load's
// context ended) and returns what they saw.
func (l *Load) Wait() Result {
	l.wg.Wait()
	return l.Result()
}

// Result returns the samples so far; the load keeps running.
func (l *Load) Result() Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Result{Samples: slices.Clone(l.samples)}
}

// WaitEach waits until each of the load's clients has made n successful
// connections that started at or after t, or ctx ends.
func (l *Load) WaitEach(ctx context.Context, clients int, t time.Time, n int) error {
	for {
		per := map[int]int{}
		for _, s := range l.Result().Since(t).Samples {
			if s.Err == "" {
				per[s.Client]++
			}
		}
		done := len(per) == clients
		for _, c := range per {
			done = done && c >= n
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not every one of %d clients made %d connections (by client: %v): %w", clients, n, per, ctx.Err())
		case <-time.After(pollEvery):
		}
	}
}

// Result is the samples of a load.
type Result struct {
	Samples []Sample
}

// Summary counts a result. A reconnect is any connection after a client's
// first: the first cannot resume, having no ticket yet.
type Summary struct {
	// Conns counts every connection, Failures those that failed.
	Conns, Failures int
	// Reconnects counts the successful reconnects; Resumed and Full split
	// them. FirstFull counts the clients' first connections, full by nature.
	Reconnects, Resumed, Full, FirstFull int
	// Moved counts the reconnects that reached another replica than the
	// client's previous connection, and MovedResumed those of them that
	// resumed: a session carried across replicas.
	Moved, MovedResumed int
	// Retried counts the successful connections whose server sent a
	// HelloRetryRequest: a round trip more.
	Retried int
	// P50 and P99 are latencies of successful connections.
	P50, P99 time.Duration
}

// Summary counts r.
func (r Result) Summary() Summary {
	var s Summary
	var lat []time.Duration
	prev := map[int]string{} // each client's previous backend
	for _, x := range r.Samples {
		s.Conns++
		if x.Err != "" {
			s.Failures++
			continue
		}
		lat = append(lat, x.Latency)
		if x.Retried {
			s.Retried++
		}
		if x.Seq == 0 {
			s.FirstFull++
			prev[x.Client] = x.Backend
			continue
		}
		s.Reconnects++
		if x.Resumed {
			s.Resumed++
		} else {
			s.Full++
		}
		if p, ok := prev[x.Client]; ok && p != x.Backend {
			s.Moved++
			if x.Resumed {
				s.MovedResumed++
			}
		}
		prev[x.Client] = x.Backend
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		s.P50 = lat[len(lat)/2]
		s.P99 = lat[len(lat)*99/100]
	}
	return s
}

// ResumptionRate is the share of reconnects that resumed, 0 without any.
func (s Summary) ResumptionRate() float64 {
	if s.Reconnects == 0 {
		return 0
	}
	return float64(s.Resumed) / float64(s.Reconnects)
}

// Groups counts the successful connections by the key exchange they
// negotiated, keyed "resumed <group>", "full <group>" (a reconnect that did
// not resume) or "first <group>" (a client's first connection).
func (r Result) Groups() map[string]int {
	out := map[string]int{}
	for _, x := range r.Samples {
		switch {
		case x.Err != "":
			continue
		case x.Seq == 0:
			out["first "+x.Group.String()]++
		case x.Resumed:
			out["resumed "+x.Group.String()]++
		default:
			out["full "+x.Group.String()]++
		}
	}
	return out
}

// Since returns the samples that started at or after t.
func (r Result) Since(t time.Time) Result {
	var out Result
	for _, x := range r.Samples {
		if !x.Start.Before(t) {
			out.Samples = append(out.Samples, x)
		}
	}
	return out
}

// Errors returns the distinct failure messages with their counts.
func (r Result) Errors() map[string]int {
	errs := map[string]int{}
	for _, x := range r.Samples {
		if x.Err != "" {
			errs[x.Err]++
		}
	}
	return errs
}

// ByBackend splits the reconnects by the replica that answered.
func (r Result) ByBackend() map[string]Summary {
	parts := map[string]Result{}
	for _, x := range r.Samples {
		if x.Err == "" {
			p := parts[x.Backend]
			p.Samples = append(p.Samples, x)
			parts[x.Backend] = p
		}
	}
	out := make(map[string]Summary, len(parts))
	for b, p := range parts {
		out[b] = p.Summary()
	}
	return out
}

// ActiveKeys returns the distinct active key ids the replicas served, in the
// order they were first seen.
func (r Result) ActiveKeys() []string {
	var keys []string
	for _, x := range r.Samples {
		if x.ActiveKey != "" && !slices.Contains(keys, x.ActiveKey) {
			keys = append(keys, x.ActiveKey)
		}
	}
	return keys
}

// FirstTicket is a session cache that keeps the first ticket it is given
// and ignores every later one, so each connection presents that same ticket,
// however old, as a client holding on to a session would.
type FirstTicket struct {
	mu sync.Mutex
	cs *tls.ClientSessionState
}

// Get implements tls.ClientSessionCache.
func (c *FirstTicket) Get(string) (*tls.ClientSessionState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cs, c.cs != nil
}

// Put implements tls.ClientSessionCache.
func (c *FirstTicket) Put(_ string, cs *tls.ClientSessionState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cs == nil && cs != nil {
		c.cs = cs
	}
}

// Held reports whether a ticket was kept.
func (c *FirstTicket) Held() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cs != nil
}

// isLoopback reports whether addr is a loopback address, for checking that
// nothing the harness reaches lies beyond the machine.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
