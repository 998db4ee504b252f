package blackhole

import (
	"errors"
	"net"
	"testing"
	"time"
)

// A client connects and reads: nothing comes back before its deadline, and
// the listener counts the connection while it is open.
func TestListenerNeverAnswers(t *testing.T) {
	l := Listen(t)
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", l.Addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	if _, err := conns[0].Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = conns[0].SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	n, err := conns[0].Read(make([]byte, 1))
	var ne net.Error
	if n != 0 || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read %d bytes, %v; want a timeout with nothing read", n, err)
	}
	for deadline := time.Now().Add(5 * time.Second); l.MaxOpen() < 3 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if l.Accepted() != 3 || l.MaxOpen() != 3 {
		t.Fatalf("accepted %d, at most %d open; want 3 and 3", l.Accepted(), l.MaxOpen())
	}
	for _, c := range conns {
		_ = c.Close()
	}
	for deadline := time.Now().Add(5 * time.Second); l.Open() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if l.Open() != 0 {
		t.Fatalf("%d connections still open after their clients hung up", l.Open())
	}
	if l.Port() <= 0 {
		t.Fatalf("port %d", l.Port())
	}
}
